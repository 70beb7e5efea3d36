"""The CPU of one Locust process, shared by every user it runs (docs/models.md §9).

A Locust process is one thread: gevent runs its users' greenlets one at a time. Every publish
and every delivery (frame parsing, the callback, the ack, the record) costs it CPU, and while
it spends that on one user the others wait. Calibration measures the cost per client
operation (``ClientPath.cpu_per_op``: the marginal CPU of a publish or a delivery, fitted over
the process's per-second samples, ``testbed.observe.process_cpu``).
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
    """One Locust process: ``take(t)`` books ``cost`` seconds of its CPU at the first free
    instant ≥ ``t`` and returns that instant."""

    def __init__(self, cost: float) -> None:
        if cost < 0:
            raise ValueError(f"CPU cost per client operation must be ≥ 0, not {cost!r}")
        self.cost = cost
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.booked = 0.0
        """CPU seconds booked in all (its utilisation over a run is booked / duration)."""
        self.waited = 0.0
        """Seconds requests were pushed back by work booked before them."""

    def take(self, t: float) -> float:
        c = self.cost
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
        e = s + c
        # every booking costs the same, so a gap shorter than one can never be used: it is
        # merged into its neighbours, which keeps the calendar short at high utilisation
        left = i > 0 and s - ends[i - 1] < c
        right = i < n and starts[i] - e < c
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
        self.waited += s - t
        return s

    def done_by(self, t: float) -> float:
        """Book one operation that would *end* at `t` on a free process (the work precedes the
        instant it stands for: a delivery ready to start, a publish's timestamp) and return
        the instant it ends, ≥ `t` when other bookings push it back."""
        return self.take(t - self.cost) + self.cost


class Processes:
    """The Locust processes of a run (``scenario.workers``), each a ``ClientCpu``; users are
    dealt to them in turn, in the order they are made — the even spread Locust's dispatcher
    gives users of fixed counts (which user shares a process with which is an approximation
    for more than one process). No processes when the profile has no CPU cost per operation."""

    def __init__(self, workers: int, cost: float | None) -> None:
        self.cpus = [ClientCpu(cost) for _ in range(workers)] if cost else []
        self._dealt = 0

    def next(self) -> ClientCpu | None:
        if not self.cpus:
            return None
        cpu = self.cpus[self._dealt % len(self.cpus)]
        self._dealt += 1
        return cpu
