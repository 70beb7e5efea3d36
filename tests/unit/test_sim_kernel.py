"""Guard for the simulator kernel's use of SimPy internals (`emulator.sim.kernel`).

`Kernel.call` hands ``Environment.schedule`` a bare `_Call` that carries only what
``Environment.step`` reads of an event — ``callbacks`` and the private ``_ok`` — instead of a
``Timeout``. These tests fail loudly when a SimPy release changes that: a new version, a
``step`` that reads something else, or an order of callbacks that differs from Timeouts'.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import simpy

from emulator.sim.kernel import Kernel, _Call

ROOT = Path(__file__).resolve().parents[2]


def test_simpy_is_the_version_the_kernel_was_checked_against() -> None:
    pinned = re.search(r"^simpy==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned is not None and simpy.__version__ == pinned.group(1) == "4.1.2", (
        f"SimPy {simpy.__version__}: check that Environment.step still reads only an event's "
        "callbacks and _ok (emulator/sim/kernel.py _Call), then update this pin"
    )


def test_step_reads_only_callbacks_and_ok_of_a_successful_event() -> None:
    source = inspect.getsource(simpy.Environment.step)
    read = set(re.findall(r"\bevent\.(\w+)", source))
    # _defused and _value are read only for a failed event (_ok false); a _Call never fails
    assert read == {"callbacks", "_ok", "_value"}, read
    assert "if not event._ok and not hasattr(event, '_defused')" in source
    assert set(_Call.__slots__) == {"callbacks", "_ok", "value"}


def test_calls_run_in_time_then_schedule_order_among_timeouts() -> None:
    k = Kernel()
    seen: list[tuple[str, float, object]] = []

    def note(name: str):  # noqa: ANN202 - a small callback factory
        return lambda ev: seen.append((name, k.now, ev.value))

    k.call(1.0, note("a"), 1)
    k.env.timeout(1.0, "t").callbacks.append(note("timeout"))
    k.call(0.5, note("c"), 3)
    k.call_at(1.0, note("d"), 4)
    k.call_at(-5.0, note("e"), 5)  # in the past: now
    k.env.run()
    assert seen == [
        ("e", 0.0, 5),
        ("c", 0.5, 3),
        ("a", 1.0, 1),
        ("timeout", 1.0, "t"),
        ("d", 1.0, 4),
    ]


def test_a_call_stops_nothing_and_a_run_until_an_event_still_stops() -> None:
    k = Kernel()
    ran: list[float] = []
    for t in (1.0, 2.0, 3.0):
        k.call(t, lambda ev: ran.append(k.now))
    stop = k.env.timeout(2.5)
    k.env.run(until=stop)
    assert ran == [1.0, 2.0] and k.now == 2.5
    k.env.run()
    assert ran == [1.0, 2.0, 3.0]
