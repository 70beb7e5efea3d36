"""Queue depth from the records, accumulated as they stream past (``queue_depth_mean``).

The definition is the report's (``testbed.analysis.metrics``): the exact time-average over the
load window ``[start, end)`` of the copies in each queue. Every delivery that settles a copy
(acked, dropped, dead-lettered) contributes the time from the message's publish to its
``t_done``; a copy delivered but never settled, and a message never delivered at all (in its
destination queue), count from the publish until the window ends. Clipped to the window,
divided by its length; the whole run is the sum over queues.

Streaming: settled rows are summed at once; a copy seen only unsettled waits in a small
``pending`` map (in-flight failures, not the run's history); two growable boolean arrays per
queue (a byte per message) remember which copies were settled and which messages were
delivered, so neither the deliveries nor the messages are kept.
"""

from __future__ import annotations

__all__ = ["DepthStream", "SETTLED"]

import numpy as np

from testbed.core.records import OUTCOMES

SETTLED = ("acked", "dropped", "dead_lettered")
_SETTLED_CODES = np.array([OUTCOMES.index(o) for o in SETTLED])
_UNROUTABLE = OUTCOMES.index("unroutable")  # never in a queue: no area (live: no t_in)


class _Flags:
    """A growable boolean array indexed by message number."""

    def __init__(self) -> None:
        self.a = np.zeros(1024, dtype=bool)

    def _fit(self, hi: int) -> None:
        if hi > len(self.a):
            grown = np.zeros(max(hi, 2 * len(self.a)), dtype=bool)
            grown[: len(self.a)] = self.a
            self.a = grown

    def set(self, m: np.ndarray) -> None:
        if len(m):
            self._fit(int(m.max()) + 1)
            self.a[m] = True

    def get(self, m: np.ndarray) -> np.ndarray:
        out = np.zeros(len(m), dtype=bool)
        inside = m < len(self.a)
        out[inside] = self.a[m[inside]]
        return out


class DepthStream:
    """``queue_depth_mean`` per queue code and overall (see the module docstring)."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.area: dict[int, float] = {}
        self.settled: dict[int, _Flags] = {}
        self.delivered = _Flags()
        self.pending: dict[tuple[int, int], float] = {}

    def _add(self, q: np.ndarray, t_in: np.ndarray, t_out: np.ndarray) -> None:
        span = np.clip(np.minimum(t_out, self.end) - np.maximum(t_in, self.start), 0.0, None)
        span[np.isnan(span)] = 0.0
        for k in np.unique(q):
            self.area[int(k)] = self.area.get(int(k), 0.0) + float(span[q == k].sum())

    def deliveries(
        self,
        m: np.ndarray,
        q: np.ndarray,
        outcome: np.ndarray,
        t_pub: np.ndarray,
        t_deliver: np.ndarray,
        t_done: np.ndarray,
    ) -> None:
        """A batch of delivery rows (message numbers, queue and outcome codes, times)."""
        self.delivered.set(m)
        ok = np.isin(outcome, _SETTLED_CODES)
        out = np.where(np.isnan(t_done), t_deliver, t_done)
        self._add(q[ok], t_pub[ok], out[ok])
        for k in np.unique(q[ok]):
            sel = ok & (q == k)
            self.settled.setdefault(int(k), _Flags()).set(m[sel])
        wait = ~ok & (outcome != _UNROUTABLE)
        for mi, qi, tp in zip(
            m[wait].tolist(), q[wait].tolist(), t_pub[wait].tolist(), strict=True
        ):
            self.pending.setdefault((qi, mi), tp)

    def messages(self, m: np.ndarray, dest: np.ndarray, t_pub: np.ndarray) -> None:
        """A chunk of messages, after every delivery was seen: the undelivered ones count."""
        never = ~self.delivered.get(m) & ~np.isnan(t_pub)
        self._add(dest[never], t_pub[never], np.full(int(never.sum()), self.end))

    def figures(self, names: list[str]) -> dict[tuple[str, str | None, str | None], float]:
        """``queue_depth_mean`` keyed as the summary's figures; ``names`` names the codes."""
        for (qi, mi), tp in self.pending.items():
            flags = self.settled.get(qi)
            if flags is None or not flags.get(np.array([mi]))[0]:
                self._add(np.array([qi]), np.array([tp]), np.array([self.end]))
        self.pending.clear()
        span = self.end - self.start
        if span <= 0 or not self.area:
            return {}
        out: dict[tuple[str, str | None, str | None], float] = {
            ("queue_depth_mean", None, None): sum(self.area.values()) / span
        }
        for k, area in sorted(self.area.items(), key=lambda kv: names[kv[0]]):
            out[("queue_depth_mean", names[k], None)] = area / span
        return out
