"""The wake-up of an idle machine (docs/models.md §9a): when nothing was published and no
handler started or ended for a while, the next message takes longer to reach its consumer.

The delivery tables are measured on a machine that is never idle for more than a few
milliseconds; a scenario of a few messages a second (SPECjms2007 interaction 3: six price
updates a second) leaves it idle for a hundred. Measured on such a run, the first copy of a
message took a median 0.72 ms on RabbitMQ after 5-10 ms of idle and 1.2-1.3 ms after more than
20 ms; calibration measures the extra delay by idle time (`ClientPath.wake`) on a sparse stream
of its own, and the simulator adds it to the delivery of a message published after that much
idle time. The clock keeps the latest instant of activity the simulator has decided — a
producer's publish, a handler's end (a start follows a publish or another handler's end by no more
than a client path) — and a publish while some decided end still lies ahead finds the machine
busy: one comparison per delivery, where a heap of future ends cost 7 % of the simulator's speed
at 100,000 msg/s for an answer that is "awake" there anyway.

On ActiveMQ a fanned-out message's wake-up and its routing to the extra queues overlap, so its
copies take the wake-up less the routing (``Costs.per_destination`` per extra queue), never
less than nothing (``WakeClock.fanned``; the kind's ``wake_overlaps_routing``). On SPECjms2007
interaction 3 (five queues a message, 2026-11-28 and -29) a first copy published after more
than 50 ms of idle took 0.19 and 0.21 ms longer than one published within 10 ms of activity,
where the calibrations' one-queue wake-up was 0.44 and 0.38 ms and their fan delay 0.28 ms;
added on top of each other they had put the predicted first copies 0.24-0.37 ms late after
idle time. On RabbitMQ they add up: the same scenario's first copies took 0.375 ms longer
after idle time against a calibrated 0.16-0.35 ms and a fan delay of 0.13 ms (2026-11-29).
"""

from __future__ import annotations

__all__ = ["WakeClock"]

from collections.abc import Callable


class WakeClock:
    """The machine's idle time at each publish, and the wake-up delay it costs."""

    __slots__ = ("delay", "overlap", "_end", "_last")

    def __init__(self, delay: Callable[[float], float], overlap: float = 0.0) -> None:
        self.delay = delay
        self.overlap = overlap
        """Routing time per extra queue of a fanned-out message the wake-up overlaps (s)."""
        self._end = 0.0  # the latest handler end decided so far (possibly in the future)
        self._last = 0.0  # the latest publish

    def active(self, t: float) -> None:
        """A handler ends at ``t`` (possibly in the future)."""
        if t > self._end:
            self._end = t

    def publish(self, now: float) -> float:
        """A publish at ``now``: the wake-up delay its delivery takes (s, ≥ 0); none while a
        decided handler end lies ahead (the machine is busy)."""
        end, last = self._end, self._last
        self._last = now
        if end > now:
            return 0.0
        idle = now - (end if end > last else last)
        return self.delay(idle) if idle > 0.0 else 0.0

    def fanned(self, w: float, copies: int) -> float:
        """The wake-up ``w`` of a message routed to ``copies`` queues, less the routing it
        overlaps; never below nothing."""
        return max(0.0, w - self.overlap * (copies - 1))
