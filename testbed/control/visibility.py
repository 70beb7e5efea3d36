"""SQS-style visibility timeout on brokers that have none (MODELS.md §4), live side.

Mechanism (the same on RabbitMQ and ActiveMQ): a delivered message is *leased* for VT seconds
by the consumer that holds it (unacked, so no other consumer sees it). Ack settles the lease.
When the lease expires, the holder **re-enqueues a copy** of the message — same message id,
same original publish time and type, attempt number + 1 in the ``x-mqbed-attempt`` header — to
the same queue, then acks the original. After `max_deliveries` attempts the copy goes to the
dead-letter queue instead. Each expiry is an ``events`` row.

Why a copy rather than the broker's own requeue:
- ActiveMQ: a STOMP NACK dead-letters (persistent) or drops (transient) instead of redelivering,
  and broker-side redelivery has a 1 s floor (FACTS.md) — it cannot express VT < 1 s.
- RabbitMQ 3.10: `basic.nack(requeue=True)` works (~0.6 ms), but classic queues carry no delivery
  count, so `max_deliveries` could not be enforced once a message moves to another consumer;
  the attempt header travels with the copy. (Consumer-side nack-requeue is still used for
  failures when no visibility timeout is configured.)
- Both: a copy is visible to every consumer at once, like an SQS message whose timeout lapsed;
  ordering is "out-of-order" (the copy goes to the tail), the MODELS.md default.

The policy (which attempt dead-letters, when leases expire) is the pure
:class:`testbed.core.policies.LeaseBook`; this module only acts on its decisions.
"""

from __future__ import annotations

__all__ = ["VisibilityController"]

from collections.abc import Callable
from typing import Any

from testbed.brokers.base import Delivery
from testbed.core.policies import LeaseBook
from testbed.workload.config import RunClock
from testbed.workload.recorder import Recorder

Requeue = Callable[[Delivery, int, str], None]
"""(delivery, next_attempt, target_queue) -> publish the copy; the controller then acks."""


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
    ):
        self.book = LeaseBook(timeout, max_deliveries)
        self.dead_letter_queue = dead_letter_queue
        self.clock = clock
        self.recorder = recorder
        self.consumer = consumer_name
        self.republish = republish
        self.expired_count = 0

    def lease(self, delivery: Delivery, attempt: int, t_deliver: float, extra: Any) -> None:
        """Start the lease of one attempt at its delivery time."""
        self.book.lease(id(delivery), delivery.msg_id, attempt, t_deliver, (delivery, extra))

    def holds(self, delivery: Delivery) -> bool:
        return id(delivery) in self.book._live

    def settle(self, delivery: Delivery) -> bool:
        """Ack path: True if the lease was still live (the ack counts)."""
        return self.book.settle(id(delivery)) is not None

    def extend_visibility(self, delivery: Delivery, extra: float) -> float:
        """`ChangeMessageVisibility`: returns the new expiry (run seconds)."""
        return self.book.extend(id(delivery), extra, self.clock.now()).expires

    def next_expiry(self) -> float | None:
        return self.book.next_expiry()

    def tick(self) -> int:
        """Act on every lease that has run out. Returns how many expired."""
        now = self.clock.now()
        expired = self.book.expired(now)
        for lease, action in expired:
            delivery, (t_deliver, latency, size) = lease.payload
            queue = delivery.queue
            if action == "dead_letter":
                self.republish(delivery, lease.attempt, self.dead_letter_queue)
                outcome = "dead_lettered"
            else:
                self.republish(delivery, lease.attempt + 1, queue)
                outcome = "timed_out"
            if delivery.outcome is None:
                delivery.ack()
            t = self.clock.now()
            self.recorder.delivery(
                delivery.msg_id,
                queue,
                self.consumer,
                lease.attempt,
                t_deliver,
                t,
                outcome,
                delivery.redelivered or lease.attempt > 1,
                latency,
                size,
            )
            self.recorder.event(
                t,
                "visibility_timeout",
                queue,
                {
                    "msg_id": delivery.msg_id,
                    "attempt": lease.attempt,
                    "action": action,
                    "consumer": self.consumer,
                    "leased_at": round(lease.started, 6),
                    "late_s": round(t - lease.expires, 6),
                },
            )
            self.expired_count += 1
        return len(expired)
