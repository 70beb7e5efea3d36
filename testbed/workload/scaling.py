"""The worker side of live autoscaling: read the control file, run scaled consumer slots,
route alias traffic by the forwarding ratios (see :mod:`testbed.control.autoscaler`).

A scaled consumer group has ``max_replicas`` Locust users, one per *slot*; a slot runs a
consumer only while the control file lists it. When it is taken off the list the consumer
stops gracefully (:class:`~testbed.workload.consumer.ConsumerLoop` finishes and acks the
delivery in hand, then closes its consumer, which hands prefetched deliveries back) and the
slot waits, connected, for its next start.
"""

from __future__ import annotations

__all__ = ["ScaleControl", "AliasRouter", "CONTROL_KEY", "slot_count", "user_count"]

import bisect
import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

CONTROL_KEY = "scale_control"
"""`WorkerConfig.extra` key holding the control file's path."""
REFRESH = 0.1


class ScaleControl:
    """A cached view of the control file (re-read at most every 0.1 s)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._checked = 0.0
        self.doc: dict[str, Any] = {"seq": 0, "groups": {}, "ratios": {}}

    def refresh(self) -> dict[str, Any]:
        """The document, re-read when the last read is 0.1 s old (a small file: one read per
        process per 0.1 s; mtime is too coarse to tell two quick writes apart)."""
        now = time.monotonic()
        if now - self._checked < REFRESH:
            return self.doc
        self._checked = now
        try:
            self.doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass  # not written yet: keep the last good one (writes are atomic renames)
        return self.doc

    def queue_of(self, group: str, slot: int) -> str | None:
        """The queue slot `slot` of `group` should read now; None = the slot is off."""
        q = self.refresh().get("groups", {}).get(group, {}).get(str(slot))
        return str(q) if q is not None else None

    def ratios(self, alias: str) -> dict[str, float]:
        return dict(self.refresh().get("ratios", {}).get(alias, {}))


class AliasRouter:
    """Picks an alias member per message with the current forwarding ratios."""

    def __init__(self, control: ScaleControl, alias: str, rng: np.random.Generator) -> None:
        self.control = control
        self.alias = alias
        self.rng = rng
        self._seq = -1
        self._names: list[str] = [f"{alias}.0"]
        self._cum: list[float] = [1.0]

    def __call__(self) -> str:
        doc = self.control.refresh()
        if doc.get("seq") != self._seq:
            self._seq = doc.get("seq", 0)
            ratios = {k: v for k, v in self.control.ratios(self.alias).items() if v > 0}
            if ratios:
                self._names = sorted(ratios)
                total = sum(ratios.values())
                self._cum = list(itertools.accumulate(ratios[n] / total for n in self._names))
        i = bisect.bisect_right(self._cum, float(self.rng.random()) * self._cum[-1])
        return self._names[min(i, len(self._names) - 1)]


def slot_count(scenario: Any, group: str) -> int | None:
    """Locust users of a scaled consumer group (one per slot); None if it is not scaled."""
    for a in scenario.autoscaling:
        if a.target == group:
            n = int(a.max_replicas)
            alias = getattr(a, "alias", None)
            lb = next((x for x in scenario.topology.load_balanced if x.alias == alias), None)
            return min(n, lb.max_queues) if lb is not None else n
    return None


def user_count(scenario: Any) -> int:
    """Locust users of a run: producers, consumers, and every slot of a scaled group."""
    n = sum(p.count for p in scenario.producers)
    for c in scenario.consumers:
        slots = slot_count(scenario, c.name)
        n += c.count if slots is None else slots
    return n
