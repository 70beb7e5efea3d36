"""The phases of a run and its load window: one rule for the live run, the simulator and the Spark
job.

A run writes ``phase`` events (``detail`` ``{"phase": "warmup"|"load"|"drain"}``) at fixed times
of its clock: ``warmup`` at 0 when the scenario has a warm-up, ``load`` at the end of the
warm-up, ``drain`` at the end of the load (`phase_marks`; written by `testbed.replication` and
`emulator.sim.model`; a live run adds ``end`` when its drain is over). The load window is
``[load, drain)``: the *earliest* ``load`` event starts it and the *earliest* ``drain`` event
ends it (`load_window`). A run writes one of each per replication; should a table hold more
(parts of a recording merged twice), the earliest wins by time, never by row order — the load
ends when the drain first begins, and the Spark job (`testbed.analysis.phases.phase_bounds`, the
same rule as a ``min`` over the rows) sees no row order. A replication without a ``load``
(``drain``) event takes the given default.
"""

from __future__ import annotations

__all__ = ["PHASE", "load_window", "phase_marks"]

import math
from collections.abc import Iterable

PHASE = "phase"
"""The ``kind`` of a phase event."""


def phase_marks(warmup: float, duration: float) -> list[tuple[float, str]]:
    """``(t, phase)`` of the phase events a run writes, in time order."""
    marks = [(0.0, "warmup")] if warmup > 0 else []
    return [*marks, (float(warmup), "load"), (float(duration), "drain")]


def load_window(
    marks: Iterable[tuple[float, str | None]],
    default: tuple[float, float] = (0.0, math.inf),
) -> tuple[float, float]:
    """``(start, end)`` of the load window from ``(t, phase)`` marks: the earliest ``load``
    and the earliest ``drain`` (`default`'s value where there is none)."""
    start = end = math.inf
    for t, phase in marks:
        if phase == "load":
            start = min(start, float(t))
        elif phase == "drain":
            end = min(end, float(t))
    return (
        start if start != math.inf else float(default[0]),
        end if end != math.inf else float(default[1]),
    )
