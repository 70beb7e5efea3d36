"""One broker queue: ready copies, consumers with prefetch credit, leases (docs/models.md §3c, §4).

The queue holds message *copies* (a fan-out message has one copy per bound queue) as message
numbers. Dispatch is round-robin among consumers with credit (RabbitMQ's active-consumer
list): ``avail`` holds exactly the attached consumers with credit > 0, in turn order.

Dispatch is *eager*: a copy that arrives while nothing waits and a consumer has credit is
handed over at once, stamped with the time it becomes ready (``ready_at`` ≥ now, after the
broker stage's service). Otherwise it waits in ``ready`` and leaves, in FIFO order, when credit
returns, at ``max(now, ready_at)``. FIFO order and the credit limit are kept exactly; only the
choice of *which* consumer may differ from a broker that decides at ``ready_at``. With the
``shared_lock`` model (``locked``), every dispatch goes through the broker's lock instead.

Visibility timeout (§4): a dispatched copy is leased for ``vt`` seconds from dispatch; if the
lease expires before the ack reaches the broker the copy is visible again (requeued at the
head, as a RabbitMQ requeue) and its next delivery is attempt n+1; after ``max_deliveries``
attempts it is dead-lettered. ``in_order`` queues dispatch only while nothing is unacked nor
on its way back to the head (``returning``, a redelivery in the threads model's dispatch
stage): the oldest message goes first and a newer one waits for an older one still invisible
(SQS FIFO).
``max_length`` drops the oldest ready copy on overflow (RabbitMQ's default drop-head).
"""

from __future__ import annotations

__all__ = ["Queue"]

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.sim.broker import Broker
    from emulator.sim.consumers import Consumer


class Queue:
    """A queue's state and its dispatch rule."""

    def __init__(
        self,
        broker: Broker,
        name: str,
        idx: int,
        *,
        durable: bool = True,
        max_length: int | None = None,
        vt: float | None = None,
        max_deliveries: int = 1_000_000,
        in_order: bool = False,
        deliver_a: float = 0.0,
        deliver_b: float = 0.0,
    ) -> None:
        self.broker = broker
        self.name = name
        self.idx = idx
        self.durable = durable
        self.max_length = max_length
        self.vt = vt
        self.max_deliveries = max_deliveries
        self.in_order = in_order
        self.dlq: Queue | None = None
        self.transient = False  # exists only while a consumer is attached (docs/models.md §6)
        self.deliver_a = deliver_a  # non-queueing delivery residual δ = a + b·size (amqp)
        self.deliver_b = deliver_b
        self.jitter: Callable[[], float] | None = None  # δ's draw: measured table, or fit spread
        self.at: Callable[[float], float] | None = None  # the table's draw at a given uniform
        self.turn: Callable[[], float] | None = None  # δ's draw after a wait (turnaround)
        # δ's scale by the consumer's idle time before it (testbed.core.consumer_idle.idle_scaler)
        self.idle_scale: Callable[[float], float] | None = None
        self.waited = False  # the copy being dispatched waited for a consumer's credit
        self.locked = False  # shared_lock: dispatch through broker.try_lock
        self.ready: deque[tuple[float, int]] = deque()
        self.avail: deque[Consumer] = deque()
        self.consumers: list[Consumer] = []
        self.unacked = 0
        self.attempts: dict[int, int] = {}  # copies that were delivered before: attempts so far
        self.free = 0.0  # the queue process (amqp) is busy until then
        self.published = 0
        self.delivered = 0
        self.acked = 0
        self.dropped = 0
        self.staged = 0  # admitted copies still in a broker stage (threads), counted as ready
        self.returning = 0  # in order: redeliveries still in a broker stage; the line waits
        self.lock_busy = False  # shared_lock state
        self.writers: list[Any] = []

    # -- consumers --------------------------------------------------------------------------

    def attach(self, c: Consumer) -> None:
        self.consumers.append(c)
        if c.credit > 0:
            self.avail.append(c)
        self.pump()

    def detach(self, c: Consumer) -> None:
        """Stop dispatching to ``c`` (its unacked copies stay until acked or expired)."""
        if c in self.consumers:
            self.consumers.remove(c)
        if c in self.avail:
            self.avail.remove(c)

    # -- arrivals ---------------------------------------------------------------------------

    def admit(self, m: int) -> None:
        """Count a new copy of message ``m`` and charge its memory (flow control)."""
        self.published += 1
        b = self.broker
        b.mem += b.sizes[m] + b.mem_overhead
        if b.mem > b.mem_threshold and not b.blocked:
            b.block()

    def enqueue(self, m: int, ready_at: float) -> None:
        """A new copy of message ``m``, ready for dispatch at ``ready_at``.

        ``ready_at`` must not decrease from one call to the next (a FIFO broker stage);
        stages that finish out of order call ``admit`` early and ``insert`` when ready.
        """
        self.published += 1  # admit(m), inlined: this is the hot path
        b = self.broker
        b.mem += b.sizes[m] + b.mem_overhead
        if b.mem > b.mem_threshold and not b.blocked:
            b.block()
        if not self.locked and not self.ready and self.avail and not self.in_order:
            self._dispatch(m, ready_at, 1)
        else:
            self.insert(m, ready_at)

    def insert(self, m: int, ready_at: float) -> None:
        """An admitted copy joins the ready list (or goes straight to a consumer)."""
        ready = self.ready
        if self.locked:
            ready.append((ready_at, m))
            self._overflow()
            self.broker.try_lock(self)
        elif not ready and self.avail and (not self.in_order or not self.busy_line()):
            self._dispatch(m, ready_at, 1)
        else:
            ready.append((ready_at, m))
            if self.max_length is not None:
                self._overflow()

    def requeue(self, m: int, attempts: int, ready_at: float, tail: bool = False) -> None:
        """A copy is visible again after ``attempts``: at the head (nack-requeue, lease expiry)
        or at the tail (a re-enqueued copy)."""
        self.attempts[m] = attempts
        if tail:
            self.ready.append((ready_at, m))
        else:
            self.ready.appendleft((ready_at, m))
        self.pump()

    def _overflow(self) -> None:
        ml = self.max_length
        if ml is not None:
            while len(self.ready) > ml:
                _, old = self.ready.popleft()
                self.attempts.pop(old, None)
                self.dropped += 1
                self.broker.discard(self, old)

    # -- dispatch ---------------------------------------------------------------------------

    def pump(self) -> None:
        """Dispatch waiting copies while consumers have credit."""
        if self.locked:
            self.broker.try_lock(self)
            return
        ready, avail = self.ready, self.avail
        if not ready or not avail:
            return
        now = self.broker.env.now
        while ready and avail:
            if self.in_order and self.busy_line():
                return
            ready_at, m = ready.popleft()
            self.waited = ready_at < now  # ready before the credit came back
            self._dispatch(m, ready_at if ready_at > now else now, self.attempts.pop(m, 0) + 1)
        self.waited = False

    def busy_line(self) -> bool:
        """In order: a delivery is unacked, or one is on its way back to the head."""
        return bool(self.unacked or self.returning)

    def take_consumer(self) -> Consumer:
        """The next consumer in turn with credit; spends one credit."""
        c = self.avail.popleft()
        c.credit -= 1
        if c.credit > 0:
            self.avail.append(c)
        self.unacked += 1
        self.delivered += 1
        return c

    def _dispatch(self, m: int, t: float, attempt: int) -> None:
        self.take_consumer().deliver(self, m, attempt, t)

    # -- settlement -------------------------------------------------------------------------

    def remove(self, m: int, acked: bool = True) -> None:
        """An unacked copy is deleted: acked, or (``acked=False``) auto-acked at dispatch,
        which a broker's ack rate does not count."""
        self.unacked -= 1
        if acked:
            self.acked += 1
        b = self.broker
        if b.crn_keys is not None:
            b.crn_keys.pop(m, None)
        b.mem -= b.sizes[m] + b.mem_overhead
        if b.blocked and b.mem <= b.mem_threshold:
            b.unblock()
        if self.in_order:
            self.pump()

    def release(self, m: int) -> None:
        """An unacked copy stops being unacked without being deleted (lease expiry)."""
        self.unacked -= 1
