"""A consumer instance: takes deliveries, serves them, acks per the scenario, records each attempt.

One consumer serves one message at a time (it is one server in queueing terms); `prefetch`
only bounds how many the broker may push ahead. Ack modes:

- ``auto``: the broker considers a message delivered when it sends it.
- ``after_receive``: ack on arrival, then serve (at-most-once for the application).
- ``after_processing``: serve, then ack (at-least-once).

A delivery *fails* with `failure_probability` (the consumer drops it without ack). Under
``after_processing`` the message then stays leased until its visibility timeout (when the queue
has one; see :mod:`testbed.control.visibility`) or is handed back at once (RabbitMQ
`nack(requeue)`, ActiveMQ re-enqueue: STOMP NACK would dead-letter it). Under the other modes
the message was already acknowledged: a failure loses it (outcome ``dropped``).

In order (``visibility.in_order``): prefetch 1, one active consumer per queue, and a failed
attempt holds the head of the line until its lease runs out (`testbed.control.visibility`).

Follow-up publishes (message-driven chains) go out after a successful service.
"""

from __future__ import annotations

__all__ = ["ConsumerLoop"]

import time
from collections.abc import Callable

import numpy as np

from testbed.brokers.base import (
    AckMode,
    BrokerAdapter,
    Consumer,
    DeclarationError,
    Delivery,
    Producer,
)
from testbed.control.visibility import VisibilityController
from testbed.core.broker_kinds import KINDS
from testbed.core.clock import RunClock
from testbed.core.scenario import ConsumerSpec, Scenario
from testbed.core.seeds import failure_uniform, keyed_failures
from testbed.core.visibility import (
    consumer_prefetch,
    dead_letter_queue,
    holds_head_of_line,
)
from testbed.observe.process_cpu import SPANS
from testbed.observe.recorder import Recorder
from testbed.workload.config import HDR_ATTEMPT, HDR_TYPE
from testbed.workload.consumer_publish import ConsumerPublishing
from testbed.workload.crashes import ClientCrash
from testbed.workload.topology import subscription_declarations

LOCKED_WAIT = 5.0
"""Seconds a consumer retries declaring its transient queue while the broker still holds it
for the consumer's previous, dead connection (RESOURCE_LOCKED)."""


class ConsumerLoop(ConsumerPublishing):
    """One consumer instance of a consumer group."""

    poll = 0.05
    """Longest wait for deliveries before checking leases and the stop flag again."""

    def __init__(
        self,
        spec: ConsumerSpec,
        scenario: Scenario,
        adapter: BrokerAdapter,
        recorder: Recorder,
        clock: RunClock,
        rng: np.random.Generator,
        instance: str,
        should_stop: Callable[[], bool],
        seed: int | None = None,
    ):
        self.spec = spec
        self.adapter = adapter
        self.recorder = recorder
        self.clock = clock
        self.rng = rng
        self.name = instance
        self.should_stop = should_stop
        self.received = 0
        self._service = spec.service_time.sampler(rng)
        self._uniform = rng.random
        self._producers: dict[str, Producer] = {}
        self._follow_seq = 0
        self._current: tuple[Delivery, int, float, float | None, bool, int] | None = None
        queue = scenario.queue(spec.queue)
        self._durable = bool(queue and queue.durable)
        self._transient = bool(queue and queue.transient)
        self._declare = subscription_declarations(scenario, spec.queue)
        """A transient queue lives with this consumer's connection: declared (and bound) on it
        each time the loop starts, after a crash or reconnect too (docs/models.md §6)."""
        vis = queue.visibility if queue is not None else None
        self._in_order = holds_head_of_line(vis)
        self._prefetch = consumer_prefetch(spec.prefetch, vis)
        self._again: list[Delivery] = []  # in order, ActiveMQ: unacked, to serve again
        self.visibility: VisibilityController | None = None
        if vis is not None and spec.ack != "auto":
            self.visibility = VisibilityController(
                vis.timeout, vis.max_deliveries, dead_letter_queue(spec.queue, vis), clock,
                recorder, instance, self._republish,
                hold_in_process=KINDS[scenario.broker.kind].visibility == "in_process",
                requeue_head=self._requeue_head if self._in_order else None,
            )  # fmt: skip
        self._keyed = seed is not None and keyed_failures(
            spec.failure_probability, spec.ack, vis is not None
        )
        """Failures keyed by message and attempt (`testbed.core.seeds.failure_uniform`), so the
        predicted twin fails the same attempts; `seed` is the replication's."""
        self._seed = seed or 0
        self._requeue_capable = adapter.capabilities.nack_requeue
        self.settling = False
        """True from a delivery's ack to its record: a crash then waits (`crash`)."""
        self._deferred: ClientCrash | None = None

    def defer(self, exc: ClientCrash) -> None:
        """Take the crash `exc` right after the record of the delivery being settled
        (`testbed.workload.crashes.throw_crash` calls this while `settling`). A crash landing
        inside the ack (whose socket write can yield) left a message the broker had taken the
        ack of recorded as ``crashed``: never redelivered, the ledger counted it lost. The
        record follows the ack by well under a millisecond, so the crash moves by as much."""
        self._deferred = exc

    def _raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    def _requeue_head(self, d: Delivery) -> None:
        """In order: `d`'s lease ran out, back to the head of the line: RabbitMQ requeues it
        (to this consumer next); ActiveMQ cannot, so it stays unacked here, served again."""
        if self._requeue_capable:
            d.nack(requeue=True)
        else:
            self._again.append(d)

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> None:
        ack_mode: AckMode = "auto" if self.spec.ack == "auto" else "manual"
        consumer = self._subscribe(ack_mode)
        if self._transient:
            self.recorder.event(
                self.clock.now(), "subscribed", self.name, {"queue": self.spec.queue}
            )
        try:
            while not self.should_stop():
                timeout = self.poll
                if self.visibility is not None:
                    nxt = self.visibility.next_expiry()
                    if nxt is not None:
                        timeout = max(0.0, min(timeout, nxt - self.clock.now()))
                    self.visibility.tick()
                if self._again:
                    self._handle(self._again.pop(0))
                    continue
                for d in consumer.drain(timeout):
                    self._handle(d)
                    if self.should_stop():
                        break
        except ClientCrash:
            self._crash()
            raise
        except self.adapter.connection_errors:  # type: ignore[misc]
            self._connection_lost()
            raise
        else:
            if self.visibility is not None:
                self.visibility.release_held()  # copies held for their VT go back now
                self.visibility.release_leases()  # in order: held attempts go back on close
            try:  # graceful stop
                consumer.close()  # unacked deliveries go back to the broker
            except self.adapter.connection_errors:  # type: ignore[misc]
                pass
            for p in self._producers.values():
                try:
                    p.close()
                except self.adapter.connection_errors:  # type: ignore[misc]
                    pass

    def _subscribe(self, ack_mode: AckMode) -> Consumer:
        """The broker's consumer. An exclusive queue of this consumer's previous connection may
        still be locked for a moment after a crash (until the broker notices the old
        connection is gone): its declaration is retried for up to `LOCKED_WAIT` s."""
        deadline = time.monotonic() + LOCKED_WAIT
        while True:
            try:
                return self.adapter.consumer(
                    self.spec.queue,
                    prefetch=self._prefetch,
                    ack_mode=ack_mode,
                    declare=self._declare,
                )
            except DeclarationError:
                if not self._declare or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _connection_lost(self) -> None:
        """The broker went away: the delivery in hand will be redelivered (recorded as
        ``crashed``: its processing never completed), leases are void, held copies are kept."""
        now = self.clock.now()
        self._drop_in_hand(now)
        self._again.clear()  # unacked: the broker requeues them
        if self.visibility is not None:
            self.visibility.connection_lost()
        self._producers = {}

    def _drop_in_hand(self, now: float) -> None:
        """The delivery being served never completed: record it as ``crashed`` (unacked, the
        broker redelivers it; under auto/after_receive it is lost with the consumer)."""
        if self._current is not None:
            d, attempt, t_deliver, latency, redelivered, size = self._current
            self._record(d, attempt, t_deliver, now, "crashed", redelivered, latency, size)
        self._current = None

    def _record(
        self,
        d: Delivery,
        attempt: int,
        t_deliver: float,
        t_done: float,
        outcome: str,
        redelivered: bool,
        latency: float | None,
        size: int,
        service_s: float | None = None,
    ) -> None:
        """One attempt's ``deliveries`` row."""
        self.recorder.delivery(
            d.msg_id, d.queue, self.name, attempt, t_deliver, t_done, outcome, redelivered,
            latency, size, service_s=service_s,
        )  # fmt: skip

    def _crash(self) -> None:
        """Abrupt end: nothing is acked or released; the broker requeues what was unacked."""
        now = self.clock.now()
        self._drop_in_hand(now)
        self._again.clear()
        lost = self.visibility.abandon() if self.visibility is not None else 0
        self.recorder.event(now, "consumer_crashed", self.name, {"held_copies_lost": lost})
        self._producers = {}

    def _serve(self, seconds: float) -> None:
        """Sleep for the service time, still acting on leases that expire meanwhile."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.visibility is not None:
                nxt = self.visibility.next_expiry()
                if nxt is not None:
                    left = min(left, max(0.0, nxt - self.clock.now()))
            time.sleep(left)
            if self.visibility is not None:
                self.visibility.tick()

    def _fail_draw(self, d: Delivery, attempt: int) -> float:
        """The uniform that decides whether this attempt fails: keyed by the message when the
        group's failures are (a producer's message: its id without the run's prefix), else
        the instance's stream."""
        prefix = self.recorder.id_prefix
        if self._keyed and d.msg_id.startswith(prefix):
            key = d.msg_id[len(prefix) :]
            return failure_uniform(self._seed, self.spec.name, key, attempt)
        return self._uniform()

    def _handle(self, d: Delivery) -> None:
        self.received += 1
        # delivery = the moment this consumer starts on the message (the simulator's definition);
        # a batch drained at once is served one by one, so the adapter's receive stamp is early
        now_ns = time.time_ns()
        t_deliver = self.clock.of_ns(now_ns)
        latency = (now_ns - d.t_publish_ns) / 1e9 if d.t_publish_ns else None
        try:
            attempt = int(d.headers.get(HDR_ATTEMPT, 1))
        except (TypeError, ValueError):
            attempt = 1
        if self._in_order and self.visibility is not None:
            attempt = self.visibility.next_attempt(d, attempt)
        redelivered = bool(d.redelivered) or attempt > 1
        msg_type = str(d.headers.get(HDR_TYPE, ""))
        size = len(d.body)
        self._current = (d, attempt, t_deliver, latency, redelivered, size)
        ack = self.spec.ack
        vis = self.visibility
        if vis is not None:
            vis.lease(d, attempt, t_deliver, (t_deliver, latency, size))
        if ack == "after_receive":
            if vis is not None:
                vis.settle(d)
            d.ack()
        if self.spec.failure_probability > 0 and self._fail_draw(d, attempt) < (
            self.spec.failure_probability
        ):
            self._fail(d, attempt, t_deliver, latency, redelivered, size)
            return
        service = self._service()
        self._serve(service)
        SPANS.start()  # the delivery's end: ack and record (observe.process_cpu's spans)
        self.settling = True
        try:
            if ack == "after_processing":
                if vis is not None and not vis.settle(d):
                    self._current = None
                    SPANS.stop()  # not counted, as before: this attempt was no delivery's end
                    return  # the lease ran out during service: recorded as timed_out
                d.ack()
            self._record(
                d, attempt, t_deliver, self.clock.now(), "acked", redelivered, latency, size,
                service_s=max(service, 0.0),
            )  # fmt: skip
            SPANS.ack_s += SPANS.stop()
            self._current = None
        finally:
            self.settling = False
            self._raise_deferred()  # a crash that came meanwhile (over a connection error too)
        self._follow_ups(d, msg_type)

    def _fail(
        self,
        d: Delivery,
        attempt: int,
        t_deliver: float,
        latency: float | None,
        redelivered: bool,
        size: int,
    ) -> None:
        now = self.clock.now()
        self._current = None  # recorded below (or by the visibility controller)
        if self.spec.ack != "after_processing":
            self._record(d, attempt, t_deliver, now, "dropped", redelivered, latency, size)
            return
        if self.visibility is not None:
            if self._in_order:
                self.visibility.hold(d)  # unacked, leased: the head of the line waits
            else:
                self.visibility.fail(d, attempt, t_deliver, latency, size)
            return
        if self._requeue_capable:
            d.nack(requeue=True)
        else:
            self._republish(d, attempt + 1, d.queue)
            d.ack()
        self._record(d, attempt, t_deliver, now, "nacked", redelivered, latency, size)
