"""The run clock: every live component (workload, control loops, samplers, fault runner) stamps
its rows in seconds since the workload start t = 0, from one shared `t0_ns`."""

from __future__ import annotations

__all__ = ["RunClock"]

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RunClock:
    """Seconds since the workload start, from the shared `t0_ns` (``time.time_ns()`` units,
    shared by every process on the host)."""

    t0_ns: int

    def now(self) -> float:
        return (time.time_ns() - self.t0_ns) / 1e9

    def of_ns(self, t_ns: int) -> float:
        return (t_ns - self.t0_ns) / 1e9
