"""How fast this machine runs Python at a given moment: a fixed loop timed with the stdlib's
`timeit`, best of a few repeats (a preemption lengthens one repeat, not the best).

Recorded where the client path is measured (``client_path.provenance.cpu_loop_ms``) and where
a run starts (``environment.json``, ``host.cpu_loop_ms``), so that a machine that changed speed
between the calibration and the run shows as a number. It did on 2026-11-29: a run's Locust
worker spent 50 % more CPU on the same messages than three hours before, and its delivery
body was 20-25 % slower than the fresh calibration just before it predicted (docs/accuracy.md),
with nothing else on the machine to blame.
"""

from __future__ import annotations

__all__ = ["LOOP", "SLOWER", "compare", "loop_ms", "speed_check"]

import timeit
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testbed.core.profile import Profile

LOOP = "sum(i * i for i in range(10_000))"
"""The timed statement: pure interpreter work, no I/O, no allocation that grows."""
SLOWER = 1.15
"""A run this many times slower (or faster) than its profile's calibration gets a warning."""


def loop_ms(number: int = 20, repeat: int = 5) -> float:
    """Milliseconds per `LOOP`, best of `repeat` timings of `number` loops (~50 ms in all)."""
    return round(min(timeit.repeat(LOOP, number=number, repeat=repeat)) / number * 1000, 4)


def compare(calibrated_ms: float | None, run_ms: float | None) -> dict[str, Any] | None:
    """The run's loop time against the calibration's (None when either is unknown)."""
    if not calibrated_ms or not run_ms:
        return None
    ratio = run_ms / calibrated_ms
    return {
        "calibration_cpu_loop_ms": calibrated_ms,
        "run_cpu_loop_ms": run_ms,
        "ratio": round(ratio, 3),
        "changed": ratio > SLOWER or ratio < 1 / SLOWER,
    }


def speed_check(profile: Profile, say: Callable[[str], None]) -> dict[str, Any] | None:
    """This machine's loop time now against the one of the calibration of `profile`'s client
    path (`compare`); `say` warns when it changed by more than `SLOWER`."""
    cp = profile.client_path
    then = cp.provenance.cpu_loop_ms if cp is not None else None
    if not then:  # a profile from before the probe (the shipped ones): nothing to time against
        return None
    speed = compare(then, loop_ms())
    if speed is not None and speed["changed"]:
        say(
            f"warning: this machine runs a fixed Python loop in {speed['ratio']:.2f}x the time "
            "it took when the profile was measured; predicted latencies may be off by as much"
        )
    return speed
