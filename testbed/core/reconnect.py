"""The backoff of a client that lost its broker: it sleeps `FIRST_RETRY`, tries to connect, and
doubles its sleep after every failed try, to at most `RETRY_CAP` (0.1, 0.2, 0.4, 0.8, 1.6, 2,
2, ... seconds).

The live users (`testbed.workload.users`) sleep these delays between their connection attempts;
the simulator (`emulator.sim.faults_clients`) schedules its reconnects by `next_attempt`.
"""

from __future__ import annotations

__all__ = ["FIRST_RETRY", "RETRY_CAP", "next_attempt", "next_delay"]

FIRST_RETRY = 0.1
"""Seconds slept before the first connection attempt."""
RETRY_CAP = 2.0
"""The longest sleep between two attempts."""


def next_delay(delay: float) -> float:
    """The sleep after a failed attempt that followed a sleep of `delay`."""
    return min(RETRY_CAP, delay * 2)


def next_attempt(t: float, delay: float, up_at: float) -> tuple[float, float]:
    """The first connection attempt at or after ``up_at`` of a client that sleeps ``delay``
    from ``t`` and sleeps `next_delay` after every failed try; with the sleep that follows it,
    should that attempt fail too (the broker killed again meanwhile)."""
    while True:
        t += delay
        delay = next_delay(delay)
        if t >= up_at:
            return t, delay
