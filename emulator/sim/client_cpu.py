"""The CPU of one Locust process, shared by every user it runs (docs/models.md §9).

A Locust process is one thread: gevent runs its users' greenlets one at a time. Every publish
and every delivery (frame parsing, the callback, the ack, the record) costs it CPU, and while
it spends that on one user the others wait. Calibration measures the cost per client
operation and where it goes (``ClientPath.cpu``, ``testbed.observe.process_cpu``): a publish's
work ends at its timestamp; a delivery's *receive* work (socket reads, frame parsing) ends
where its handler starts, and other deliveries arriving meanwhile wait for it; its *ack* work
(ack, record) follows its service — the consumer's hold already counts it as its own time, so
it only occupies the process for the others. Booking a delivery's whole cost before its
handler (revision 2) made the tenth of ten fanned-out copies wait for nine whole operations:
0.4 ms per copy where the measured copies of the fan-out 1→10 follow each other by ~0.2 ms.
The fitted receive CPU still holds work done after a handler has started (timers, the
service's wake-up); a profile that measured the gap between fanned-out copies in one process
(``ClientPath.copy_gap``) books only that much before the handler and the rest with the ack
(``Costs.client_cpu``).
A handler's follow-ups are sent ``follow_gap`` apart (``ClientPath.follow_gap``: a publish's
wall time in a handler, more than its CPU), and the handler holds its process all that time:
deliveries to the process's other consumers that arrive meanwhile start after it.
The delivery and hold tables already carry the *average* contention of the calibration's
independent Poisson streams; what they cannot carry is work that arrives together: one
published message fanned out to five queues whose five consumers live in one process (the
fifth waits for the other four), or a thousand deliveries a second asking for more CPU than
one process has.

Why a calendar, not a SimPy resource: the simulator decides everything about a delivery when
it is dispatched (``emulator.sim.consumers``), so its CPU work is booked for a future instant,
and bookings arrive out of time order. ``ClientCpu`` keeps the booked busy intervals, sorted
and merged, and gives each request the first gap at or after its instant that holds its
work — a work-conserving single server in the order the requests are decided. Intervals
``KEEP`` seconds older than the latest request are dropped, and gaps too short for one more
booking are closed, so the calendar stays short.
"""

from __future__ import annotations

__all__ = ["ClientCpu", "KEEP", "Processes"]

from bisect import bisect_left, bisect_right

KEEP = 10.0
"""Seconds of booked intervals kept behind the latest request (bookings are decided at most a
delivery's transit ahead of the clock)."""
_PRUNE_AT = 512


class ClientCpu:
    """One Locust process: ``take(t, c)`` books ``c`` seconds of its CPU at the first free
    instant ≥ ``t`` and returns that instant. ``publish``, ``receive`` and ``ack`` are its costs
    per operation (``ClientPath.cpu``): a publish, a delivery's work before its handler starts,
    and its ack and record after its service."""

    def __init__(
        self,
        publish: float,
        receive: float,
        ack: float = 0.0,
        follow_gap: float | None = None,
    ) -> None:
        costs = (publish, receive, ack)
        if any(c < 0 for c in (*costs, follow_gap or 0.0)):
            raise ValueError(
                f"CPU costs per client operation must be ≥ 0, not {costs!r} "
                f"(follow-up gap {follow_gap!r})"
            )
        self.publish, self.receive, self.ack = costs
        self.follow_gap = publish if follow_gap is None else follow_gap
        """Time between the stamps of one handler's consecutive follow-ups, during which the
        handler does not yield its process (``ClientPath.follow_gap``; else ``publish``)."""
        self.gap = min((c for c in costs if c > 0), default=0.0)
        """Gaps shorter than the cheapest booking can never be used: they are closed."""
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.booked = 0.0
        """CPU seconds booked in all (its utilisation over a run is booked / duration)."""
        self.waited = 0.0
        """Seconds requests were pushed back by work booked before them."""

    def take(self, t: float, c: float) -> float:
        starts, ends = self.starts, self.ends
        n = len(starts)
        if n > _PRUNE_AT:
            k = bisect_left(ends, t - KEEP)
            if k:
                del starts[:k]
                del ends[:k]
                n -= k
        i = bisect_right(ends, t)  # the first interval still busy after t
        s = t
        while i < n and starts[i] < s + c:
            if ends[i] > s:
                s = ends[i]
            i += 1
        self.waited += s - t
        if c <= 0:
            return s  # the first free instant; nothing to book
        e = s + c
        g = self.gap
        # a gap shorter than the cheapest booking can never be used: it is merged into its
        # neighbours, which keeps the calendar short at high utilisation
        left = i > 0 and s - ends[i - 1] < g
        right = i < n and starts[i] - e < g
        if left and right:
            ends[i - 1] = ends[i]
            del starts[i]
            del ends[i]
        elif left:
            ends[i - 1] = e
        elif right:
            starts[i] = s
        else:
            starts.insert(i, s)
            ends.insert(i, e)
        self.booked += c
        return s

    def done_by(self, t: float, c: float) -> float:
        """Book ``c`` seconds of work that would *end* at `t` on a free process (the work
        precedes the instant it stands for: a delivery's handler starting, a publish's
        timestamp) and return the instant it ends, ≥ `t` when other bookings push it back."""
        return self.take(t - c, c) + c


class Processes:
    """The Locust processes of a run (``scenario.workers``), each a ``ClientCpu``; users are
    dealt to them in turn, in the order they are made — the even spread Locust's dispatcher
    gives users of fixed counts (which user shares a process with which is an approximation
    for more than one process). No processes when the profile has no CPU cost per operation."""

    def __init__(
        self,
        workers: int,
        costs: tuple[float, float, float] | None,
        follow_gap: float | None = None,
    ) -> None:
        self.cpus = (
            [ClientCpu(*costs, follow_gap=follow_gap) for _ in range(workers)]
            if costs and any(costs)
            else []
        )
        self._dealt = 0

    def next(self) -> ClientCpu | None:
        if not self.cpus:
            return None
        cpu = self.cpus[self._dealt % len(self.cpus)]
        self._dealt += 1
        return cpu
