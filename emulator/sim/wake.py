"""The wake-up of an idle machine (docs/models.md §9a): when nothing was published and no
handler started or ended for a while, the next message takes longer to reach its consumer.

The delivery tables are measured on a machine that is never idle for more than a few
milliseconds; a scenario of a few messages a second (SPECjms2007 interaction 3: six price
updates a second) leaves it idle for a hundred. Measured on such a run, the first copy of a
message took a median 0.72 ms on RabbitMQ after 5-10 ms of idle and 1.2-1.3 ms after more than
20 ms; calibration measures the extra delay by idle time (`ClientPath.wake`) on a sparse stream
of its own, and the simulator adds it to the delivery of a message published after that much
idle time. The clock keeps the instants of activity the simulator has already decided — the
publishes and the handlers' ends (a start follows a publish or another handler's end by no
more than a client path) — and reads the last one before a publish.

Hand-written: no library keeps "the latest of a set of future instants that is already past"
cheaper than one heap.
"""

from __future__ import annotations

__all__ = ["WakeClock"]

from collections.abc import Callable
from heapq import heappop, heappush


class WakeClock:
    """The machine's idle time at each publish, and the wake-up delay it costs."""

    __slots__ = ("delay", "_pending", "_last")

    def __init__(self, delay: Callable[[float], float]) -> None:
        self.delay = delay
        self._pending: list[float] = []  # decided instants of activity not yet past
        self._last = 0.0

    def active(self, t: float) -> None:
        """Something runs at ``t`` (a handler's end, possibly in the future)."""
        heappush(self._pending, t)

    def publish(self, now: float) -> float:
        """A publish at ``now``: the wake-up delay its delivery takes (s, ≥ 0)."""
        pending = self._pending
        last = self._last
        while pending and pending[0] <= now:
            t = heappop(pending)
            if t > last:
                last = t
        idle = now - last
        self._last = now
        return self.delay(idle) if idle > 0.0 else 0.0
