"""Visibility-timeout leases (docs/models.md §4), a pure policy: callers pass `now`.

Used by the live controller (`testbed/control/visibility.py`). The simulator does not use it:
it keeps its leases in `emulator/sim/queues.py` and `consumers.py` (docs/architecture.md,
"Known debts").

Visibility timeout (docs/models.md §4): :class:`LeaseBook` keeps one lease per in-flight delivery.
A lease starts when the broker dispatches an attempt; acking settles it; when it expires the
message must become visible again (``redeliver``) or, once `max_deliveries` attempts have been
made, go to the dead-letter queue (``dead_letter``): `testbed.core.visibility.dead_letters`.
"""

from __future__ import annotations

__all__ = ["Lease", "LeaseBook", "VisibilityAction"]

import heapq
from dataclasses import dataclass, field
from typing import Any, Literal

from testbed.core.visibility import dead_letters

VisibilityAction = Literal["redeliver", "dead_letter"]


@dataclass(order=True)
class Lease:
    expires: float
    key: Any = field(compare=False)
    msg_id: str = field(compare=False)
    attempt: int = field(compare=False)
    started: float = field(compare=False)
    payload: Any = field(default=None, compare=False, repr=False)
    """Caller's handle (e.g. the delivery object); the policy never looks inside."""


class LeaseBook:
    """Leases of in-flight deliveries, ordered by expiry (a heap with lazy deletion)."""

    def __init__(self, timeout: float, max_deliveries: int):
        if timeout <= 0:
            raise ValueError(f"visibility timeout must be > 0 s, got {timeout!r}")
        if max_deliveries < 1:
            raise ValueError(f"max_deliveries must be >= 1, got {max_deliveries!r}")
        self.timeout = timeout
        self.max_deliveries = max_deliveries
        self._heap: list[Lease] = []
        self._live: dict[Any, Lease] = {}

    def __len__(self) -> int:
        return len(self._live)

    def lease(self, key: Any, msg_id: str, attempt: int, now: float, payload: Any = None) -> Lease:
        """Start the lease of one delivery attempt (`key` identifies the delivery)."""
        lease = Lease(now + self.timeout, key, msg_id, attempt, now, payload)
        self._live[key] = lease
        heapq.heappush(self._heap, lease)
        return lease

    def settle(self, key: Any) -> Lease | None:
        """The attempt was acked (or otherwise finished): its lease ends. None if unknown."""
        return self._live.pop(key, None)

    def extend(self, key: Any, extra: float, now: float) -> Lease:
        """`ChangeMessageVisibility`: the lease now expires `extra` seconds from `now`."""
        old = self._live.get(key)
        if old is None:
            raise KeyError(f"no live lease for delivery {key!r} (already settled or expired)")
        if extra < 0:
            raise ValueError(f"visibility extension must be >= 0 s, got {extra!r}")
        new = Lease(now + extra, key, old.msg_id, old.attempt, old.started, old.payload)
        self._live[key] = new
        heapq.heappush(self._heap, new)
        return new

    def next_expiry(self) -> float | None:
        self._prune()
        return self._heap[0].expires if self._heap else None

    def expired(self, now: float) -> list[tuple[Lease, VisibilityAction]]:
        """Leases that ran out by `now`, each with what to do. They are removed from the book."""
        out: list[tuple[Lease, VisibilityAction]] = []
        while self._heap and self._heap[0].expires <= now:
            lease = heapq.heappop(self._heap)
            if self._live.get(lease.key) is not lease:
                continue  # settled or extended: a stale heap entry
            del self._live[lease.key]
            out.append((lease, self.decide(lease.attempt)))
        return out

    def decide(self, attempt: int) -> VisibilityAction:
        """After attempt number `attempt` (1-based) timed out: try again or give up."""
        return "dead_letter" if dead_letters(attempt, self.max_deliveries) else "redeliver"

    def _prune(self) -> None:
        while self._heap and self._live.get(self._heap[0].key) is not self._heap[0]:
            heapq.heappop(self._heap)
