"""`CpuMeter`: foreign load is other processes' CPU plus the hypervisor's steal."""

from __future__ import annotations

import time
from types import SimpleNamespace

import psutil
import pytest

from testbed.observe.foreign_load import CpuMeter


def test_own_cpu_is_not_foreign(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose only work is this process's own busy loop has no foreign load (the
    machine's counter is faked to this process's CPU time: the real one also holds whatever
    else runs beside the test, e.g. the other pytest-xdist worker)."""
    me = psutil.Process()

    def cpu_times() -> SimpleNamespace:
        own = me.cpu_times()
        return SimpleNamespace(user=own.user, nice=0.0, system=own.system, steal=0.0)

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    meter = CpuMeter()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # this process's own CPU: never foreign
        pass
    assert meter.foreign_cores() < 0.05
    assert meter.steal_cores() == 0.0


def test_other_processes_cpu_is_foreign(monkeypatch: pytest.MonkeyPatch) -> None:
    me = psutil.Process()
    other = {"s": 0.0}

    def cpu_times() -> SimpleNamespace:
        own = me.cpu_times()
        return SimpleNamespace(user=own.user + other["s"], nice=0.0, system=own.system, steal=0.0)

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    # this tree is this process alone, as the faked machine is: under xdist the tree also holds
    # the session's brokers, whose CPU (absent from the fake) took 0.36 cores off the foreign
    # load in a full make test
    monkeypatch.setattr(
        CpuMeter, "_tree", lambda self: {me.pid: me.cpu_times().user + me.cpu_times().system}
    )
    meter = CpuMeter()
    time.sleep(0.5)
    other["s"] = 0.5  # another process used 0.5 CPU-seconds over ~0.5 s: ~1 core
    # CPU times count in clock ticks (10 ms): a few ticks of this process's own reads land on
    # one side or the other, ~0.02 cores each over 0.5 s
    assert 0.85 < meter.foreign_cores() < 1.1


def test_steal_counts_as_foreign_load(monkeypatch: pytest.MonkeyPatch) -> None:
    real = psutil.cpu_times()
    stolen = {"s": 0.0}

    def cpu_times() -> SimpleNamespace:
        # the machine's busy columns frozen, its steal column advancing (the kernel's /proc/stat
        # cannot be made to steal on demand)
        return SimpleNamespace(
            user=real.user, nice=real.nice, system=real.system, irq=0.0, softirq=0.0,
            steal=stolen["s"],
        )  # fmt: skip

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    # this tree idle: under xdist it holds the session's brokers, whose CPU (subtracted from a
    # frozen machine total) took 0.23 cores off the steal in a full make test
    monkeypatch.setattr(CpuMeter, "_tree", lambda self: {})
    meter = CpuMeter()
    time.sleep(0.2)
    stolen["s"] = 0.4  # 0.4 CPU-seconds stolen over ~0.2 s: ~2 cores
    steal = meter.steal_cores()
    assert 1.0 < steal < 2.1
    assert meter.foreign_cores() >= steal * 0.9
