"""SQS-style visibility timeout on brokers that have none (docs/models.md §4), live side.

A delivered message is *leased* for VT seconds from its delivery. Three things can happen:

1. **Ack** within VT: the lease is settled, the message is gone.
2. **The consumer fails** the attempt (drops it, `failure_probability`): the message must stay
   invisible until the lease runs out and then be visible to every consumer again — without
   occupying the failed consumer (in SQS a failed receive does not block the receiver). So
   the consumer hands the message back to the *broker* at once, delayed by the remaining VT:
   - RabbitMQ: a copy goes to ``<queue>.vt-delay``, a queue with ``x-message-ttl = VT`` that
     dead-letters expired messages back into ``<queue>`` (crash-safe, broker-side);
   - ActiveMQ: the consumer acks the original and *holds* the copy in its process until the
     lease runs out, then re-sends it to ``<queue>``. STOMP NACK cannot do it (it dead-letters
     or drops; broker redelivery has a 1 s floor — docs/architecture.md), and the broker scheduler
     (``AMQ_SCHEDULED_DELAY``) releases on a ~500 ms grid here (100 ms → 500 ms, 1 s → 1.5 s,
     measured 2026-11-21), far outside a ±100 ms visibility timeout. Trade-off: a consumer that
     *crashes* inside the VT window loses the copies it holds (the ledger counts them lost);
     a consumer that stops normally releases them first.
   then the original is acked (RabbitMQ: after the copy is published). The copy carries the
   same message id, original publish time and
   type, and attempt number + 1 (``x-mqbed-attempt``), so `max_deliveries` holds across
   consumers (RabbitMQ 3.10 classic queues keep no delivery count).
3. **Processing outlives VT** (a slow consumer): when the lease expires the holder re-enqueues a
   copy immediately (visible to others, like SQS) and acks the original; its late completion is
   not acked again and is not counted as a delivery.

After `max_deliveries` attempts the copy goes to the dead-letter queue (``<queue>.dlq``) instead.
Every expiry is an ``events`` row of kind ``visibility_timeout``, stamped with the time the
message became visible again. By default ordering is out-of-order (copies go to the tail,
docs/models.md §4).

**In order** (``in_order: true``, `testbed.core.visibility.holds_head_of_line`; the consumer
is the one active consumer of its queue, with prefetch 1): nothing is handed back early and no
copy is made. A failed attempt stays unacked (`hold`), so the broker sends this consumer
nothing newer, until its lease runs out; then, as for a slow consumer's expiry, the attempt is
recorded ``timed_out`` and `requeue_head` puts the message back at the head of the line —
RabbitMQ: ``nack(requeue)``, the broker returns it to its place and delivers it next; ActiveMQ
(STOMP NACK dead-letters): the consumer keeps it unacked, still the broker's head of line, and
serves it again itself. The message comes back with its old headers, so the attempt number of
that redelivery is kept here (`next_attempt`).

The policy (which attempt dead-letters, when leases expire) is the pure
:class:`testbed.core.policies.LeaseBook` and the rules of :mod:`testbed.core.visibility` (also
the queue names), shared with the simulator; this module acts on its decisions.
"""

from __future__ import annotations

__all__ = ["VisibilityController"]

import heapq
from collections.abc import Callable
from typing import Any

from testbed.brokers.base import Delivery
from testbed.core.clock import RunClock
from testbed.core.policies import LeaseBook
from testbed.core.policies.visibility import Lease, VisibilityAction
from testbed.observe.recorder import Recorder

Requeue = Callable[[Delivery, int, str, float], None]
"""(delivery, attempt of the copy, target queue, delay s) -> publish the copy, invisible for
`delay` seconds; the controller then acks the original."""
HeadRequeue = Callable[[Delivery], None]
"""In order: give the (unacked) delivery back to the head of the line, to be delivered again."""


class VisibilityController:
    """Leases for the deliveries one consumer holds, acted on from the consumer's own loop."""

    def __init__(
        self,
        timeout: float,
        max_deliveries: int,
        dead_letter_queue: str,
        clock: RunClock,
        recorder: Recorder,
        consumer_name: str,
        republish: Requeue,
        hold_in_process: bool = False,
        requeue_head: HeadRequeue | None = None,
    ):
        self.book = LeaseBook(timeout, max_deliveries)
        self.hold_in_process = hold_in_process
        self.requeue_head = requeue_head
        """Set for an in-order queue: expired attempts go back to the head, uncopied."""
        self._failed: set[int] = set()  # in order: held failed attempts (ids of deliveries)
        self._next: dict[str, int] = {}  # in order: msg id -> attempt of its next delivery
        self._held: list[tuple[float, int, Delivery, int]] = []  # (release, seq, copy, attempt)
        self._seq = 0
        self.dead_letter_queue = dead_letter_queue
        self.clock = clock
        self.recorder = recorder
        self.consumer = consumer_name
        self.republish = republish
        self.expired_count = 0

    def lease(self, delivery: Delivery, attempt: int, t_deliver: float, extra: Any) -> None:
        """Start the lease of one attempt at its delivery time."""
        self.book.lease(id(delivery), delivery.msg_id, attempt, t_deliver, (delivery, extra))

    def hold(self, delivery: Delivery) -> None:
        """In order: the consumer failed this attempt; it keeps its lease (and the head of the
        line) until the lease runs out, when `tick` records it and requeues it at the head."""
        self._failed.add(id(delivery))

    def next_attempt(self, delivery: Delivery, attempt: int) -> int:
        """The attempt number of a delivery whose headers say `attempt`: higher when this
        consumer gave the message back to the head of the line (in order) after an attempt."""
        return max(attempt, self._next.pop(delivery.msg_id, 0))

    def holds(self, delivery: Delivery) -> bool:
        return id(delivery) in self.book._live

    def settle(self, delivery: Delivery) -> bool:
        """Ack path: True if the lease was still live (the ack counts)."""
        return self.book.settle(id(delivery)) is not None

    def extend_visibility(self, delivery: Delivery, extra: float) -> float:
        """`ChangeMessageVisibility`: returns the new expiry (run seconds)."""
        return self.book.extend(id(delivery), extra, self.clock.now()).expires

    def next_expiry(self) -> float | None:
        nxt = self.book.next_expiry()
        if self._held and (nxt is None or self._held[0][0] < nxt):
            return self._held[0][0]
        return nxt

    def connection_lost(self) -> None:
        """The connection dropped: the broker requeues every unacked delivery, so their leases
        are void. Held copies (ActiveMQ) are still ours and go out after the reconnect; held
        failed attempts (in order) are recorded, back in the broker's hands."""
        self._void_leases()

    def abandon(self) -> int:
        """The consumer crashed: forget every lease and held copy (the broker requeues the
        unacked deliveries; held copies are lost). Returns how many held copies were lost."""
        lost = len(self._held)
        self._held.clear()
        self._void_leases()
        return lost

    def release_leases(self) -> None:
        """A graceful stop (in order): the failed attempts still held are recorded; closing
        the consumer gives them back to the broker, at the head of the line."""
        self._void_leases()

    def _void_leases(self) -> None:
        now = self.clock.now()
        for lease in list(self.book._live.values()):
            if id(lease.payload[0]) in self._failed:
                self._record(lease, "timed_out", now)
                self._next[lease.msg_id] = lease.attempt + 1
        self._failed.clear()
        self.book = LeaseBook(self.book.timeout, self.book.max_deliveries)

    def release_held(self, now: float | None = None) -> int:
        """Re-send held copies whose time has come (all of them when `now` is None)."""
        n = 0
        while self._held and (now is None or self._held[0][0] <= now):
            _, _, d, attempt = heapq.heappop(self._held)
            self.republish(d, attempt, d.queue, 0.0)
            n += 1
        return n

    def tick(self) -> int:
        """Act on every lease that has run out. Returns how many expired."""
        now = self.clock.now()
        self.release_held(now)
        expired = self.book.expired(now)
        for lease, action in expired:
            self._expire(lease, action)
        return len(expired)

    def _expire(self, lease: Lease, action: VisibilityAction) -> None:
        delivery = lease.payload[0]
        failed = id(delivery) in self._failed
        self._failed.discard(id(delivery))
        head = self.requeue_head is not None and action == "redeliver"
        if action == "dead_letter":
            self.republish(delivery, lease.attempt, self.dead_letter_queue, 0.0)
            outcome = "dead_lettered"
        else:
            if not head:
                self.republish(delivery, lease.attempt + 1, delivery.queue, 0.0)
            outcome = "timed_out"
        t = self.clock.now()
        self._record(lease, outcome, t)
        if head:
            assert self.requeue_head is not None
            self._next[delivery.msg_id] = lease.attempt + 1
            self.requeue_head(delivery)
        elif delivery.outcome is None:
            delivery.ack()
        detail = {
            "msg_id": delivery.msg_id,
            "attempt": lease.attempt,
            "action": action,
            "consumer": self.consumer,
            "leased_at": round(lease.started, 6),
            "late_s": round(t - lease.expires, 6),
        }
        if failed:
            detail["failed"] = True
        self.recorder.event(t, "visibility_timeout", delivery.queue, detail)
        self.expired_count += 1

    def _record(self, lease: Lease, outcome: str, t_done: float) -> None:
        delivery, (t_deliver, latency, size) = lease.payload
        self.recorder.delivery(
            delivery.msg_id,
            delivery.queue,
            self.consumer,
            lease.attempt,
            t_deliver,
            t_done,
            outcome,
            delivery.redelivered or lease.attempt > 1,
            latency,
            size,
        )

    def fail(
        self, delivery: Delivery, attempt: int, t_deliver: float, latency: float | None, size: int
    ) -> None:
        """The consumer failed this attempt: back to the broker, invisible until VT runs out."""
        lease = self.book.settle(id(delivery))
        expires = lease.expires if lease is not None else t_deliver + self.book.timeout
        action = self.book.decide(attempt)
        now = self.clock.now()
        if action == "dead_letter":
            self.republish(delivery, attempt, self.dead_letter_queue, 0.0)
            outcome = "dead_lettered"
        elif self.hold_in_process:
            self._seq += 1
            heapq.heappush(self._held, (expires, self._seq, delivery, attempt + 1))
            outcome = "timed_out"
        else:
            self.republish(delivery, attempt + 1, delivery.queue, max(0.0, expires - now))
            outcome = "timed_out"
        delivery.ack()
        self.recorder.delivery(
            delivery.msg_id,
            delivery.queue,
            self.consumer,
            attempt,
            t_deliver,
            expires,
            outcome,
            delivery.redelivered or attempt > 1,
            latency,
            size,
        )
        self.recorder.event(
            expires,
            "visibility_timeout",
            delivery.queue,
            {
                "msg_id": delivery.msg_id,
                "attempt": attempt,
                "action": action,
                "consumer": self.consumer,
                "leased_at": round(t_deliver, 6),
                "failed": True,
            },
        )
        self.expired_count += 1
