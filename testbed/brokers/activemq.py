"""ActiveMQ 5.x adapter over STOMP 1.2 (stomp.py ``Connection12``).

Mapping of the AMQP-shaped declarations (documented contract):

- ``QueueDecl(q)`` -> the queue ``/queue/q`` (created by a zero-prefetch SUBSCRIBE/UNSUBSCRIBE).
  ActiveMQ queues always outlive a restart; durability is per message (``persistent:true``).
  quorum, max_length and any dead-letter target other than ``ActiveMQ.DLQ`` raise
  `UnsupportedFeature`. With ``single_active_consumer=True`` every consumer of ``q`` in this
  process subscribes with ``activemq.exclusive: true`` (ActiveMQ's exclusive consumer: one
  receives at a time, in order; the others stand by), so declare it where the consumer runs.
- ``QueueDecl(q, exclusive=True)`` or ``auto_delete=True`` (a transient subscription) -> no
  broker object: consumers of ``q`` hold a non-durable subscription to the topic ``/topic/q``
  (or, when ``q`` is bound to a fanout exchange ``x``, to ``/topic/VirtualTopic.x``), and
  producers to ``q`` send to that topic. A topic keeps nothing for an absent subscriber, so
  what is sent while no consumer is subscribed is dropped, unreported (no ``mandatory``). Such
  a queue cannot be bound to a direct or topic exchange (`UnsupportedFeature`).
- ``ExchangeDecl(x, "fanout")`` -> the Virtual Topic ``VirtualTopic.x``; producers send to
  ``/topic/VirtualTopic.x`` and the broker copies each message into every queue bound to it.
  A queue ``q`` bound to it lives physically at ``Consumer.q.VirtualTopic.x`` (one queue per
  subscriber, competing consumers within it, messages kept while nobody listens).
  Dots and other wildcard characters in ``q``/``x`` are %-escaped (``a.b`` -> ``a%2Eb``) since a
  Virtual Topic consumer name is one path word. A queue can be bound to one fanout exchange.
  `physical_queue_name` / `logical_queue_name` translate both ways (the stats poller uses them).
- ``ExchangeDecl(x, "direct" | "topic")`` -> no broker object: the producer routes on the client
  with the declared bindings (AMQP topic matching, ``*``/``#``) and sends one message to the
  composite destination ``/queue/a,/queue/b`` (the broker copies it). A producer therefore needs
  the bindings declared in its own process; an unroutable message is not sent and is confirmed
  ok with detail ``unroutable`` (what RabbitMQ does without ``mandatory``).

Acks: ``client-individual``; ``nack(requeue=False)``/``reject()`` send NACK, which dead-letters a
persistent message to ``ActiveMQ.DLQ`` and drops a transient one. ``nack(requeue=True)`` raises
`UnsupportedFeature`: STOMP requeues only when a subscription ends (``Consumer.close()``,
``cancel()`` or a disconnect), then with ``redelivered: true``. Prefetch is
``activemq.prefetchSize``; prefetch=0 ("unlimited", RabbitMQ semantics) maps to 32767.
Publisher confirms are STOMP receipts whose id is the msg id. Header values travel as strings.
"""

from __future__ import annotations

__all__ = ["ACTIVEMQ_CAPABILITIES", "ActiveMQAdapter", "logical_queue_name", "physical_queue_name"]

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

from testbed.backends.base import BrokerEndpoint
from testbed.brokers.activemq_consumer import StompConsumer
from testbed.brokers.activemq_topology import (
    ACTIVEMQ_DLQ,
    ActiveMQTopology,
    logical_queue_name,
    physical_queue_name,
)
from testbed.brokers.base import (
    HDR_MSG_ID,
    HDR_T_PUBLISH_NS,
    AckMode,
    AdapterError,
    Capabilities,
    Confirm,
    ConfirmTimeout,
    ConnectionLost,
    Declaration,
    DeclarationError,
    Destination,
    UnsupportedFeature,
    parse_publish_ns,
)
from testbed.brokers.common import ConfirmBook
from testbed.brokers.stomp_session import STOMP_ERRORS, StompSession

UNLIMITED_PREFETCH = 32767

ACTIVEMQ_CAPABILITIES = Capabilities(
    confirms=True,
    exchange_types=frozenset({"direct", "topic", "fanout"}),
    topic_wildcards=True,
    nack_requeue=False,
    nack_dead_letters=True,
    per_queue_dead_letter=False,
    fixed_dead_letter_queue=ACTIVEMQ_DLQ,
    dead_letters_transient=False,
    requeue_on_disconnect=True,
    redelivered_flag=True,
    prefetch=True,
    quorum_queues=False,
    max_length=False,
    mandatory=False,
    exclusive_queues=False,
    auto_delete_queues=False,
    auto_reconnect=False,
)


class ActiveMQAdapter:
    """`BrokerAdapter` for ActiveMQ through one STOMP connection (subscriptions multiplexed)."""

    capabilities: ClassVar[Capabilities] = ACTIVEMQ_CAPABILITIES
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (ConnectionLost, *STOMP_ERRORS)

    def __init__(self, endpoint: BrokerEndpoint, *, connect_timeout: float = 5.0) -> None:
        if endpoint.kind != "activemq":
            raise AdapterError(f"ActiveMQAdapter: endpoint {endpoint.name!r} is {endpoint.kind!r}")
        self.endpoint = endpoint
        self.where = f"activemq {endpoint.name} at {endpoint.host}:{endpoint.port}"
        self._timeout = connect_timeout
        self._lock = threading.Lock()
        self._receipts: dict[str, StompProducer] = {}
        self._stray: list[Confirm] = []
        self._producers: list[StompProducer] = []
        self.topology = ActiveMQTopology()
        self.session = self._new_session()

    def _new_session(self) -> StompSession:
        ep = self.endpoint
        return StompSession(
            ep.host, ep.port, ep.username, ep.password,
            connect_timeout=self._timeout, on_receipt=self._on_receipt, on_lost=self._on_lost,
        )  # fmt: skip

    def connect(self) -> None:
        if self.session.alive:
            return
        self.session = self._new_session()
        self.session.connect()

    def close(self) -> None:
        self.session.close()
        self._on_lost()

    def abort(self) -> None:
        self.session.abort()
        self._on_lost()

    # --- confirms (receiver thread) ---

    def _on_receipt(self, rid: str, ok: bool, detail: str) -> None:
        with self._lock:
            prod = self._receipts.pop(rid, None)
            if prod is None:
                self._stray.append(Confirm("", False, time.time_ns(), f"unknown receipt {rid!r}"))
            else:
                prod._book.settle(rid, ok, detail=detail)
            for p in self._producers:
                p._cond_notify()

    def _on_lost(self) -> None:
        with self._lock:
            self._receipts.clear()
            for p in self._producers:
                p._book.fail_all(f"connection lost: {self.where}")
                p._cond_notify()

    # --- topology ---

    def physical(self, queue: str) -> str:
        return self.topology.physical(queue)

    def declare(self, decls: Iterable[Declaration]) -> None:
        """Record exchanges/bindings (client-side), then create each queue on the broker."""
        for physical in self.topology.add(decls):
            sub = self.session.subscribe(
                f"/queue/{physical}",
                ack="client-individual",
                headers={"activemq.prefetchSize": "0"},
            )
            self.session.unsubscribe(sub)

    # --- factories ---

    def producer(
        self,
        destination: Destination | str,
        *,
        persistent: bool = False,
        confirms: bool = False,
        mandatory: bool = False,
    ) -> StompProducer:
        dest = Destination.of(destination)
        if mandatory:
            raise UnsupportedFeature(
                f"producer({dest.name!r}): mandatory is not supported on "
                f"ActiveMQ (unroutable fanout messages are not reported)"
            )
        if dest.kind == "exchange" and dest.name not in self.topology.exchanges:
            raise DeclarationError(
                f"producer: exchange {dest.name!r} is not declared in this process; ActiveMQ "
                f"routing needs declare([...ExchangeDecl, BindingDecl...]) first"
            )
        p = StompProducer(self, dest, persistent, confirms)
        with self._lock:
            self._producers.append(p)
        return p

    def consumer(
        self,
        queue: str,
        *,
        prefetch: int = 100,
        ack_mode: AckMode = "manual",
        declare: Sequence[Declaration] = (),
    ) -> StompConsumer:
        self.declare(declare)  # a transient queue: recorded, nothing made on the broker
        if ack_mode not in ("auto", "manual"):
            raise AdapterError(f"consumer({queue!r}).ack_mode: unknown {ack_mode!r}")
        if prefetch < 0:
            raise AdapterError(f"consumer({queue!r}).prefetch: must be >= 0, got {prefetch!r}")
        return StompConsumer(self, queue, prefetch or UNLIMITED_PREFETCH, ack_mode)


class StompProducer:
    """SEND frames; with confirms each carries ``receipt: <msg_id>``."""

    def __init__(
        self, adapter: ActiveMQAdapter, dest: Destination, persistent: bool, confirms: bool
    ) -> None:
        self._a = adapter
        self.destination = dest
        self.persistent = persistent
        self.confirms = confirms
        self._book = ConfirmBook()
        self._cond = threading.Condition(adapter._lock)
        self._held: list[tuple[str, bytes, dict[str, str]]] = []

    def _cond_notify(self) -> None:  # caller holds adapter._lock
        self._cond.notify_all()

    def flush(self) -> None:
        """Write the SEND frames held back by ``publish(..., flush=False)`` in one go."""
        frames, self._held = self._held, []
        if frames:
            self._a.session.send_many(frames)

    @property
    def in_flight(self) -> int:
        return len(self._book)

    def publish(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        flush: bool = True,
    ) -> int:
        hdrs = {str(k): str(v) for k, v in (headers or {}).items()}
        t_ns = parse_publish_ns(hdrs.get(HDR_T_PUBLISH_NS)) or time.time_ns()
        hdrs[HDR_T_PUBLISH_NS] = str(t_ns)
        hdrs[HDR_MSG_ID] = msg_id
        hdrs["persistent"] = "true" if self.persistent else "false"
        target = self._a.topology.route(self.destination, routing_key)
        if target is None:
            if self.confirms:
                with self._a._lock:
                    self._book.ready.append(Confirm(msg_id, True, time.time_ns(), "unroutable"))
            return t_ns
        if self.confirms:
            rid = msg_id
            with self._a._lock:
                if rid in self._a._receipts:
                    rid = self._a.session.new_id(msg_id)
                self._a._receipts[rid] = self
                self._book.add(rid, msg_id)
            hdrs["receipt"] = rid
        if flush and not self._held:
            self._a.session.send(target, body, hdrs)
        else:
            self._held.append((target, body, hdrs))
            if flush:
                self.flush()
        return t_ns

    def _take(self, msg_id: str | None) -> list[Confirm]:  # caller holds adapter._lock
        out = self._a._stray
        self._a._stray = []
        if msg_id is None:
            return out + self._book.take()
        c = self._book.take_id(msg_id)
        self._book.ready[:0] = out
        return [c] if c is not None else []

    def poll_confirms(self, timeout: float = 0.0) -> list[Confirm]:
        deadline = time.monotonic() + timeout
        with self._a._lock:
            while not self._book.ready and not self._a._stray and self._book:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self._take(None)

    def publish_and_wait(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        timeout: float = 5.0,
    ) -> Confirm:
        if not self.confirms:
            raise AdapterError(f"publish_and_wait({msg_id!r}) needs a producer with confirms=True")
        self.publish(body, msg_id=msg_id, headers=headers, routing_key=routing_key)
        deadline = time.monotonic() + timeout
        with self._a._lock:
            while True:
                got = self._take(msg_id)
                if got:
                    return got[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConfirmTimeout(
                        f"no receipt for {msg_id!r} within {timeout} s on {self._a.where}"
                    )
                self._cond.wait(left)

    def close(self) -> None:
        with self._a._lock:
            if self in self._a._producers:
                self._a._producers.remove(self)
