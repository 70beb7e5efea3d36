"""`CpuMeter`: foreign load is other processes' CPU plus the hypervisor's steal."""

from __future__ import annotations

import time
from types import SimpleNamespace

import psutil
import pytest

from testbed.calibration.client_path import CpuMeter


def test_own_busy_loop_is_not_foreign() -> None:
    meter = CpuMeter()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # this process's own CPU: never foreign
        pass
    assert meter.foreign_cores() < 0.5


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
    meter = CpuMeter()
    time.sleep(0.2)
    stolen["s"] = 0.4  # 0.4 CPU-seconds stolen over ~0.2 s: ~2 cores
    steal = meter.steal_cores()
    assert 1.0 < steal < 2.1
    assert meter.foreign_cores() >= steal * 0.9
