"""The three broker service models of docs/models.md §3, behind one publish/requeue interface.

Common to all: a message published at ``t`` reaches the broker after the network delay ``d``
(plus the confirm-mode overhead for confirming producers), is routed to its queues (exchange
routing is resolved once per routing key), and its copies enter the queues. The publisher hears
back (``sender.on_confirm``) when it asked for a confirm — or, for closed producers of the
``shared_lock`` model, when its write completed (§3b). Memory flow control: when the bytes
accounted to queued copies exceed the threshold, publishers block at their next publish until
the level falls again (RabbitMQ memory alarm / ActiveMQ producer flow control).

- ``AmqpBroker`` (§3c): per publisher channel, a fan-out costs ``per_destination`` for each
  extra queue; each queue is one FIFO process (Lindley recursion, service ``s_q(size)``); the
  confirm follows the last copy's acceptance plus ``persistence(size)`` for persistent messages
  on durable queues — or, when the profile's client path has a ``confirm`` table, the drawn
  publish → confirm time of a persistent message, never before its last copy's acceptance
  (``Broker._confirm``).
- ``ThreadsBroker`` (§3a): an N1-thread FIFO *receive* stage (enqueue; the confirm follows it)
  and an N2-thread FIFO *dispatch* stage that every delivery attempt passes before it can be
  handed to a consumer (redeliveries after a visibility timeout pass it again: λ2 = λ/p, §4).
  Both are computed by the Kiefer–Wolfowitz recursion (earliest-free thread) on arrival; a
  copy is handed to the queue when its dispatch thread finishes.
- ``SharedLockBroker`` (§3b, in `emulator.sim.shared_lock`): one lock per queue; a write holds
  it for the write time, a read (dequeue + deliver to a consumer with credit) for the read time;
  when the lock frees and both a writer and a reader wait, the next holder is "a writer" or "the
  reader" with equal probability, the writer chosen uniformly among those waiting.

Fault hooks (docs/models.md §6): ``up``/``paused`` are reported in the timeseries; a
publish passes ``link.upstream`` (its transit time) and every arrival ``link.accept`` (which
may hold or drop it: ``emulator.sim.faults`` does while the broker is down, paused or alarmed)
before ``route`` serves it (``emulator.sim.links``); the fault timeline moves queue and
consumer free times past an outage.
"""

from __future__ import annotations

__all__ = ["Broker", "AmqpBroker", "ThreadsBroker", "make_broker"]

import heapq
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from emulator.sim.costs import Costs
from emulator.sim.kernel import Kernel, batch_for, stream, uniforms
from testbed.core.threads import stage_counts

if TYPE_CHECKING:
    from emulator.sim.links import Links
    from emulator.sim.queues import Queue
    from emulator.sim.wake import WakeClock
    from testbed.core.profile import ColdStart

Sender = Any  # a Producer or a Consumer publishing follow-ups: .channel_free, .on_confirm

COLD_SPAN = 8.0
"""A restarted broker's slow start ends after this many of its decay times (e^-8 < 0.1 %)."""
RETURNED = 3
"""``notify`` of a confirmed publish the broker returned (``mandatory``): the answer reaches
the producer (a closed loop goes on) but is a failed confirm, so nothing is recorded (as
live: a basic.return before the ack makes the confirm fail)."""


class Broker:
    """State and behaviour shared by the service models."""

    kind = "base"
    blocks_closed_until_written = False

    def __init__(self, kernel: Kernel, costs: Costs, sizes: Any, seed: int, rep: int) -> None:
        self.kernel = kernel
        self.env = kernel.env
        self.call = kernel.call
        self.call_at = kernel.call_at
        self.costs = costs
        self.sizes = sizes  # message number -> size (bytes)
        self.d = costs.d
        self.mem = 0.0
        self.mem_overhead = costs.memory_overhead
        self.mem_threshold = costs.memory_threshold
        self.blocked = False
        self.waiters: list[Callable[[], None]] = []
        self.up = True
        self.pending = 0  # message copies not yet finished (for the drain)
        self.on_discard: Callable[[Queue, int], None] | None = None  # hook: overflow losses
        self.link: Links | None = None  # hooks on the publish path (emulator.sim.links)
        self.transient = False  # some queue is transient (exists while a consumer is attached)
        self.on_unroutable: Callable[[Sender, int], None] | None = None  # hook: mandatory returns
        self.confirm_draw: Callable[[], float] | None = None  # publish → confirm, persistent
        self.on_written: Callable[[int, float], None] | None = None  # hook: (m, on disk at)
        self.coupled: dict[int, list[float]] = {}
        """Message → [uniform of the delivery table (-1: none), copies not yet delivered, wake-up
        delay]: what copies sharing one draw (``couple_copies``) or published after idle time
        (``wake``) share; emptied as copies arrive."""
        self.couple_copies = False
        self.wake: WakeClock | None = None  # set with a measured wake-up (emulator.sim.wake)
        self._woken: dict[int, float] = {}  # published after idle time, not yet routed
        self.cold: ColdStart | None = None  # restarted and still slow (``cold_start``)
        self._cold_from = 0.0
        self._u = uniforms(stream(seed, rep, "broker:copies"))
        self.crn_keys: dict[int, str] | None = None  # emulator.sim.failures
        self._order = random.Random(int(stream(seed, rep, "broker:order").integers(2**63)))
        expected = 1e5
        self.residual = costs.confirm_residual.sampler(
            stream(seed, rep, "broker:confirm"), batch_for(expected)
        )

    # -- publish path -----------------------------------------------------------------------

    def publish(
        self,
        sender: Sender,
        m: int,
        queues: tuple[Queue, ...],
        notify: int,
        persistent: bool,
        extra: float = 0.0,
    ) -> None:
        """Called at the publish time; the message arrives after d (+ ``extra``, + the
        link's ``upstream`` transit time)."""
        wake = self.wake
        if wake is not None:
            w = wake.publish(self.env.now)
            if w > 0.0:
                self._woken[m] = w
        cold = self.cold
        if cold is not None:
            since = self.env.now - self._cold_from
            if since > COLD_SPAN * cold.tau_s:
                self.cold = None
            else:
                extra += cold.at(since)
        link = self.link
        if link is not None and link.upstream is not None:
            extra = link.upstream(sender, m, extra)
        self.call(self.d + extra, self._arrive, (sender, m, queues, notify, persistent))

    def cold_start(self, cold: ColdStart | None) -> None:
        """The broker is healthy again after a restart, now: it delivers ``cold.at(t)``
        slower ``t`` seconds later (the profile's ``restart_time.cold``, docs/models.md §6)."""
        if cold is not None and cold.extra_s > 0.0:
            self.cold, self._cold_from = cold, self.env.now

    def _arrive(self, ev: Any) -> None:
        self.accept(*ev.value)

    def accept(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        """The message is at the broker now (the entry for follow-up publishes): routed unless
        the link's ``accept`` holds or drops it (a held one is routed later, long awake)."""
        link = self.link
        if (
            link is None
            or link.accept is None
            or link.accept(sender, m, queues, notify, persistent)
        ):
            self.route(sender, m, queues, notify, persistent)
        elif self._woken:
            self._woken.pop(m, None)

    def route(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        """Serve a message the broker accepted now: route it to its queues (the model). A
        transient queue (``exclusive``/``auto_delete``) exists only while a consumer is attached
        (docs/models.md §6): its copy finds no queue and is dropped; a message that no queue
        takes goes back to a ``mandatory`` publisher (``on_unroutable``), as RabbitMQ's
        basic.return does, and is confirmed like any unroutable message."""
        w = self._woken.pop(m, 0.0) if self._woken else 0.0
        if self.transient:
            kept = tuple(q for q in queues if q.consumers or not q.transient)
            hook = self.on_unroutable
            if not kept and queues and hook is not None and getattr(sender, "mandatory", False):
                hook(sender, m)
                notify = RETURNED if notify == 1 else notify  # its confirm comes back failed
            queues = kept
        if not queues:
            self._unroutable(sender, m, notify)
            return
        fanned = len(queues) > 1
        if fanned:
            queues = self._arrival_order(queues)
            w = self.wake.fanned(w, len(queues)) if self.wake is not None else w
        many = fanned and self.couple_copies
        if many or w > 0.0:
            self.coupled[m] = [self._u() if many else -1.0, float(len(queues)), w]
        self._route(sender, m, queues, notify, persistent)

    def _arrival_order(self, queues: tuple[Queue, ...]) -> tuple[Queue, ...]:
        """The copies of one message in a random order: which of its queues' consumers
        hears of it first. Live the order is neither the binding order nor fixed (SPECjms2007
        interaction 3, five queues a message: each queue's copy came first in 13-34 % of
        messages on RabbitMQ and ActiveMQ alike), and the copies share the consumers' process,
        so the first one in order waits least; a fixed order gave the first bound queue a
        latency 0.4 ms below the last's where the measured ones were alike."""
        order = list(queues)
        self._order.shuffle(order)
        return tuple(order)

    def _route(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        """Serve a message with at least one queue (the model's own part of ``route``)."""
        raise NotImplementedError

    def _confirm(self, sender: Sender, m: int, notify: int, written: bool, now: float,
                 done: float, acc: float) -> None:  # fmt: skip
        """Confirm a publish that arrived at ``now`` and was through the broker's stage at
        ``done`` (``acc`` with the persistence cost): a persistent one on a durable queue at its
        drawn publish → confirm time (the client path's table, which holds the write and both
        network legs), never before ``done``; others ``d`` + residual after ``acc``."""
        draw = self.confirm_draw
        if written and draw is not None:
            sent = max(now - 2 * self.d + draw(), done)
        else:
            sent = acc + self.residual()
        if written and self.on_written is not None:
            self.on_written(m, sent)
        self.call_at(sent + self.d, sender.on_confirm, (m, notify))

    def _unroutable(self, sender: Sender, m: int, notify: int) -> None:
        self.pending -= 1  # RabbitMQ drops (and confirms) an unroutable message
        if notify:
            self.call(self.d + self.residual(), sender.on_confirm, (m, notify))

    def shared_draw(self, m: int) -> list[float] | None:
        """What a first delivery of message ``m`` shares with its sibling copies (the entry of
        ``coupled``), or None; each copy takes it once."""
        e = self.coupled.get(m)
        if e is None:
            return None
        e[1] -= 1
        if e[1] <= 0:
            del self.coupled[m]
        return e

    def requeue(self, q: Queue, m: int, attempts: int, tail: bool = False) -> None:
        """A lease expired or an attempt was nacked: the copy becomes visible again, at the head
        (nack-requeue) or the tail (a re-enqueued visibility-timeout copy)."""
        q.requeue(m, attempts, self.env.now, tail)

    def try_lock(self, q: Queue) -> None:  # pragma: no cover - shared_lock only
        raise NotImplementedError

    # -- disposal ---------------------------------------------------------------------------

    def discard(self, q: Queue, m: int) -> None:
        """A ready copy dropped by max-length overflow (lost)."""
        self.shared_draw(m)  # never delivered: its share of a coupled draw is dropped
        self.mem -= self.sizes[m] + self.mem_overhead
        self.pending -= 1
        if self.blocked and self.mem <= self.mem_threshold:
            self.unblock()
        if self.on_discard is not None:
            self.on_discard(q, m)

    def dead_letter(self, q: Queue, m: int) -> None:
        """Move a copy that exhausted its deliveries to the dead-letter queue (or drop it)."""
        self.mem -= self.sizes[m] + self.mem_overhead
        if q.dlq is not None:
            q.dlq.enqueue(m, self.env.now)
        else:
            self.pending -= 1
        if self.blocked and self.mem <= self.mem_threshold:
            self.unblock()

    # -- flow control -----------------------------------------------------------------------

    def block(self) -> None:
        self.blocked = True

    def unblock(self) -> None:
        self.blocked = False
        waiters, self.waiters = self.waiters, []
        for resume in waiters:
            self.call(0.0, _resume, resume)

    def wait_unblocked(self, resume: Callable[[], None]) -> None:
        self.waiters.append(resume)


def _resume(ev: Any) -> None:
    ev.value()


class AmqpBroker(Broker):
    kind = "amqp"

    def _route(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        n = len(queues)
        now = self.env.now
        size = self.sizes[m]
        t = now
        if n > 1:
            ch = sender.channel_free
            t = (t if t > ch else ch) + self.costs.per_destination * (n - 1)
            sender.channel_free = t
            self.pending += n - 1
        acc = routed = t
        c = self.costs
        durable = False
        for q in queues:
            st = t if t > q.free else q.free
            r = st + c.queue_a + c.queue_b * size
            q.free = r
            routed = r if r > routed else routed
            durable = durable or q.durable
            rc = r + c.persist_a + c.persist_b * size if persistent and q.durable else r
            if rc > acc:
                acc = rc
            q.enqueue(m, r)
        if notify:
            self._confirm(sender, m, notify, persistent and durable, now, routed, acc)


class ThreadsBroker(Broker):
    kind = "threads"

    def __init__(self, kernel: Kernel, costs: Costs, sizes: Any, seed: int, rep: int) -> None:
        super().__init__(kernel, costs, sizes, seed, rep)
        n1, n2 = stage_counts(costs.threads)
        self.receive_free = [0.0] * n1  # heaps of thread free times (Kiefer–Wolfowitz)
        self.dispatch_free = [0.0] * n2
        self.receive = costs.receive.sampler(stream(seed, rep, "broker:receive"))
        self.dispatch = costs.dispatch.sampler(stream(seed, rep, "broker:dispatch"))
        self.zero_dispatch = costs.dispatch.mean == 0 and costs.dispatch.variance == 0

    def _route(
        self, sender: Sender, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> None:
        n = len(queues)
        now = self.env.now
        c = self.costs
        svc = self.receive() + c.per_destination * (n - 1)
        free = self.receive_free
        f = free[0]
        end = (now if now > f else f) + svc
        heapq.heapreplace(free, end)
        if n > 1:
            self.pending += n - 1
        if notify:
            written = persistent and any(q.durable for q in queues)
            acc = end + (c.persist_a + c.persist_b * self.sizes[m] if written else 0.0)
            self._confirm(sender, m, notify, written, now, end, acc)
        self.call_at(end, self._accepted, (m, queues))

    def _accepted(self, ev: Any) -> None:
        m, queues = ev.value
        for q in queues:
            if self.zero_dispatch:
                q.enqueue(m, self.env.now)
                continue
            # N threads finish out of order: hand the copy over when its thread is done, so
            # consumers see copies in completion order
            q.admit(m)
            q.staged += 1
            self.call_at(self._dispatch_stage(), self._dispatched, (q, m, 0))

    def _dispatched(self, ev: Any) -> None:
        q, m, attempts = ev.value
        q.staged -= 1
        if attempts:
            if q.in_order:
                q.returning -= 1
            q.requeue(m, attempts, self.env.now)
        else:
            q.insert(m, self.env.now)

    def _dispatch_stage(self) -> float:
        now = self.env.now
        free = self.dispatch_free
        f = free[0]
        end = (now if now > f else f) + self.dispatch()
        heapq.heapreplace(free, end)
        return end

    def requeue(self, q: Queue, m: int, attempts: int, tail: bool = False) -> None:
        """A redelivery passes the dispatch stage again (λ2 = λ/p, §4)."""
        if self.zero_dispatch:
            q.requeue(m, attempts, self.env.now, tail)
            return
        q.staged += 1
        if q.in_order:  # nothing newer may pass it meanwhile
            q.returning += 1
        self.call_at(self._dispatch_stage(), self._dispatched, (q, m, attempts))


def make_broker(
    model: str, kernel: Kernel, costs: Costs, sizes: Any, seed: int, rep: int
) -> Broker:
    from emulator.sim.shared_lock import SharedLockBroker  # it subclasses Broker: imported late

    cls: type[Broker] = {
        "amqp": AmqpBroker,
        "threads": ThreadsBroker,
        "shared_lock": SharedLockBroker,
    }[model]
    return cls(kernel, costs, sizes, seed, rep)
