"""The machine-speed probe (testbed.observe.cpu_speed): a stable figure, compared honestly."""

from __future__ import annotations

import time

import pytest

from testbed.core.profile import Profile, default_profile
from testbed.observe import cpu_speed
from testbed.observe.cpu_speed import compare, loop_ms, speed_check
from testbed.observe.environment import environment


def test_the_loop_time_is_the_best_repeat_per_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    assert 0.01 < loop_ms() < 100
    # best of the repeats, per loop: a preempted repeat does not count. How steady the figure
    # is on a given machine is a measurement, not a test (a busy CI machine moved it 2x).
    seen: dict[str, int] = {}

    def fake_repeat(stmt: str, number: int, repeat: int) -> list[float]:
        seen.update(number=number, repeat=repeat)
        return [0.9, 0.2, 0.5][:repeat]

    monkeypatch.setattr(cpu_speed.timeit, "repeat", fake_repeat)
    assert loop_ms(number=20, repeat=3) == pytest.approx(0.2 / 20 * 1000)
    assert seen == {"number": 20, "repeat": 3}


def test_a_slower_machine_is_told_and_a_steady_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compare(None, 1.0) is None and compare(1.0, None) is None
    steady = compare(1.0, 1.1)
    assert steady is not None and not steady["changed"] and steady["ratio"] == pytest.approx(1.1)
    slow = compare(1.0, 1.5)
    assert slow is not None and slow["changed"]
    fast = compare(1.0, 0.8)
    assert fast is not None and fast["changed"]
    said: list[str] = []
    monkeypatch.setattr(cpu_speed, "loop_ms", lambda: 0.75)
    got = speed_check(_measured_at(0.5), said.append)
    assert got is not None and got["ratio"] == pytest.approx(1.5)
    assert len(said) == 1 and "1.50x" in said[0]
    assert speed_check(_measured_at(0.74), said.append) is not None and len(said) == 1
    # the shipped profiles were measured before the probe: nothing to compare
    assert speed_check(default_profile("rabbitmq"), said.append) is None and len(said) == 1


def _measured_at(ms: float) -> Profile:
    """The shipped RabbitMQ profile, as if its client path had timed the loop at `ms`."""
    p = default_profile("rabbitmq")
    cp = p.client_path
    assert cp is not None
    then = cp.provenance.model_copy(update={"cpu_loop_ms": ms})
    return p.model_copy(update={"client_path": cp.model_copy(update={"provenance": then})})


def test_the_run_environment_records_the_machine_speed() -> None:
    t0 = time.monotonic()
    env = environment()
    assert env["host"]["cpu_loop_ms"] > 0
    assert time.monotonic() - t0 < 2.0  # cheap enough to take at every run start


def test_the_run_environment_records_the_machines_memory_and_cpu_model() -> None:
    """psutil gives the memory (/proc/meminfo's MemTotal, in bytes); the CPU model, which
    psutil does not know, is still read from /proc/cpuinfo."""
    host = environment()["host"]
    with open("/proc/meminfo", encoding="ascii") as f:
        total = next(line for line in f if line.startswith("MemTotal:"))
    assert host["memory_bytes"] == int(total.split()[1]) * 1024
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    assert host["cpu_model"] == (models[0] if models else host["cpu_model"])
