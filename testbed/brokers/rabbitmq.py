"""RabbitMQ adapter over pika's BlockingConnection.

- Publisher confirms are asynchronous: the channel is put in confirm mode at the pika channel
  level, each publish gets the next delivery tag, and Basic.Ack/Nack (including ``multiple``)
  are matched back to msg ids through a `ConfirmBook`. A Basic.Return (``mandatory=True``,
  unroutable) turns that message's coming ack into a failed `Confirm`.
- The message id travels as the AMQP ``message_id`` property; the nanosecond publish time in the
  ``x-mqbed-t-publish-ns`` header (the AMQP ``timestamp`` is whole seconds, pika headers cannot be
  floats). Persistent messages use delivery_mode=2.
- ``QueueDecl.dead_letter_to`` becomes ``x-dead-letter-exchange=""`` plus
  ``x-dead-letter-routing-key=<queue>`` (the default exchange routes to that queue);
  ``kind="quorum"`` sets ``x-queue-type``; ``max_length`` sets ``x-max-length``;
  ``single_active_consumer`` sets ``x-single-active-consumer``.
- Heartbeats are off by default (``heartbeat=0``): a BlockingConnection only answers heartbeats
  while the owner calls into pika. Pass ``heartbeat=N`` for dead-peer detection and call
  `drain`/`poll_confirms` at least every N/2 s.
- pika is not thread-safe: see the threading note in `testbed.brokers.base`. Deliveries settled
  from another thread are marshalled with ``add_callback_threadsafe``.
"""

from __future__ import annotations

__all__ = ["RabbitMQAdapter"]

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

import pika
import pika.exceptions as pe
from pika.adapters.blocking_connection import BlockingChannel

from testbed.backends.base import BrokerEndpoint
from testbed.brokers.base import (
    HDR_T_PUBLISH_NS,
    AckMode,
    AdapterError,
    BindingDecl,
    Capabilities,
    ConnectionLost,
    Declaration,
    DeclarationError,
    Destination,
    ExchangeDecl,
    QueueDecl,
    parse_publish_ns,
    sort_declarations,
)
from testbed.brokers.common import PumpedProducer, shut_socket
from testbed.brokers.rabbitmq_consumer import PIKA_ERRORS as _CONN_ERRORS
from testbed.brokers.rabbitmq_consumer import PikaConsumer

RABBITMQ_CAPABILITIES = Capabilities(
    confirms=True,
    exchange_types=frozenset({"direct", "topic", "fanout"}),
    topic_wildcards=True,
    nack_requeue=True,
    nack_dead_letters=True,
    per_queue_dead_letter=True,
    fixed_dead_letter_queue=None,
    dead_letters_transient=True,
    requeue_on_disconnect=True,
    redelivered_flag=True,
    prefetch=True,
    quorum_queues=True,
    max_length=True,
    mandatory=True,
    exclusive_queues=True,
    auto_delete_queues=True,
    auto_reconnect=False,
)


def queue_arguments(q: QueueDecl) -> dict[str, Any]:
    """The x-arguments a `QueueDecl` turns into (shared with the kombu adapter)."""
    args: dict[str, Any] = {}
    if q.kind == "quorum":
        args["x-queue-type"] = "quorum"
    if q.dead_letter_to is not None:
        args["x-dead-letter-exchange"] = ""
        args["x-dead-letter-routing-key"] = q.dead_letter_to
    if q.max_length is not None:
        args["x-max-length"] = q.max_length
    if q.message_ttl is not None:
        args["x-message-ttl"] = int(round(q.message_ttl * 1000))
    if q.single_active_consumer:
        args["x-single-active-consumer"] = True
    return args


def publish_headers(headers: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:
    """Copy of `headers` with the publish-ns header set (kept if the caller set it)."""
    out = dict(headers or {})
    t_ns = parse_publish_ns(out.get(HDR_T_PUBLISH_NS))
    if t_ns is None:
        t_ns = time.time_ns()
    out[HDR_T_PUBLISH_NS] = t_ns
    return out, t_ns


class RabbitMQAdapter:
    """`BrokerAdapter` for RabbitMQ through pika. One connection; a channel per producer and
    per consumer, plus one for declarations."""

    capabilities: ClassVar[Capabilities] = RABBITMQ_CAPABILITIES
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (ConnectionLost, *_CONN_ERRORS)

    def __init__(
        self,
        endpoint: BrokerEndpoint,
        *,
        heartbeat: int = 0,
        connect_timeout: float = 5.0,
        name: str = "mqbed",
    ) -> None:
        if endpoint.kind != "rabbitmq":
            raise AdapterError(f"RabbitMQAdapter: endpoint {endpoint.name!r} is {endpoint.kind!r}")
        self.endpoint = endpoint
        self._params = pika.ConnectionParameters(
            host=endpoint.host,
            port=endpoint.port,
            virtual_host=endpoint.vhost,
            credentials=pika.PlainCredentials(endpoint.username, endpoint.password),
            heartbeat=heartbeat,
            connection_attempts=1,
            socket_timeout=connect_timeout,
            stack_timeout=connect_timeout + 5.0,
            blocked_connection_timeout=None,
            client_properties={"connection_name": name},
        )
        self._conn: pika.BlockingConnection | None = None
        self._decl_ch: BlockingChannel | None = None
        self.owner = threading.get_ident()

    @property
    def where(self) -> str:
        return f"rabbitmq {self.endpoint.name} at {self.endpoint.host}:{self.endpoint.port}"

    @contextmanager
    def translate(self, what: str) -> Iterator[None]:
        """Turn pika connection failures into `ConnectionLost` naming the operation."""
        try:
            yield
        except pe.ChannelClosedByBroker as e:
            raise AdapterError(f"{what} on {self.where}: channel closed by broker: {e}") from e
        except _CONN_ERRORS as e:
            raise ConnectionLost(f"{what} on {self.where}: {e!r}") from e

    @property
    def connection(self) -> pika.BlockingConnection:
        if self._conn is None or not self._conn.is_open:
            raise ConnectionLost(f"not connected to {self.where} (call connect())")
        return self._conn

    def connect(self) -> None:
        with self.translate("connect"):
            self._conn = pika.BlockingConnection(self._params)
        self.owner = threading.get_ident()

    def channel(self) -> BlockingChannel:
        with self.translate("open channel"):
            return self.connection.channel()

    def declare(self, decls: Iterable[Declaration]) -> None:
        for d in sort_declarations(decls):
            if self._decl_ch is None or not self._decl_ch.is_open:
                self._decl_ch = self.channel()
            ch = self._decl_ch
            try:
                with self.translate(f"declare {d!r}"):
                    if isinstance(d, ExchangeDecl):
                        ch.exchange_declare(d.name, exchange_type=d.type, durable=d.durable)
                    elif isinstance(d, QueueDecl):
                        ch.queue_declare(
                            d.name,
                            durable=d.durable,
                            exclusive=d.exclusive,
                            auto_delete=d.auto_delete,
                            arguments=queue_arguments(d) or None,
                        )
                    elif isinstance(d, BindingDecl):
                        ch.queue_bind(d.queue, d.exchange, routing_key=d.routing_key)
            except AdapterError as e:
                if isinstance(e.__cause__, pe.ChannelClosedByBroker):
                    raise DeclarationError(f"{self.where} refused {d!r}: {e.__cause__}") from e
                raise

    def producer(
        self,
        destination: Destination | str,
        *,
        persistent: bool = False,
        confirms: bool = False,
        mandatory: bool = False,
    ) -> PikaProducer:
        return PikaProducer(self, Destination.of(destination), persistent, confirms, mandatory)

    def consumer(
        self,
        queue: str,
        *,
        prefetch: int = 100,
        ack_mode: AckMode = "manual",
        declare: Sequence[Declaration] = (),
    ) -> PikaConsumer:
        if ack_mode not in ("auto", "manual"):
            raise AdapterError(f"consumer({queue!r}).ack_mode: unknown {ack_mode!r}")
        self.declare(declare)  # on this connection: an exclusive queue is this consumer's
        return PikaConsumer(self, queue, prefetch, ack_mode)

    def pump(self, time_limit: float) -> None:
        """Run pika I/O and dispatch for at most `time_limit` s (returns early on events)."""
        with self.translate("process I/O"):
            self.connection.process_data_events(time_limit=max(0.0, time_limit))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.is_open:
            with suppress(*_CONN_ERRORS):
                conn.close()

    def abort(self) -> None:
        conn, self._conn = self._conn, None
        transport = getattr(getattr(conn, "_impl", None), "_transport", None)
        shut_socket(getattr(transport, "_sock", None))  # pika keeps the socket there (1.x)


class PikaProducer(PumpedProducer):
    """Publishes to one destination on its own channel."""

    def __init__(
        self,
        adapter: RabbitMQAdapter,
        dest: Destination,
        persistent: bool,
        confirms: bool,
        mandatory: bool,
    ) -> None:
        super().__init__()
        self._a = adapter
        self.where = adapter.where
        self.destination = dest
        self.persistent = persistent
        self.confirms = confirms
        self.mandatory = mandatory
        self._tag = 0
        self._wake_armed = False
        self._ch = adapter.channel()
        impl = self._ch._impl  # pika-level channel: callbacks run as frames arrive
        impl.add_on_return_callback(self._on_return)
        impl.add_on_close_callback(self._on_close)
        if confirms:
            selected: list[bool] = []
            impl.confirm_delivery(
                ack_nack_callback=self._on_confirm, callback=lambda _f: selected.append(True)
            )
            deadline = time.monotonic() + 5.0
            while not selected:
                if time.monotonic() > deadline:
                    raise ConnectionLost(f"confirm.select timed out on {adapter.where}")
                adapter.pump(0.05)

    def _pump(self, timeout: float) -> None:
        self._a.pump(timeout)

    def _on_confirm(self, frame: Any) -> None:
        m = frame.method
        ok = isinstance(m, pika.spec.Basic.Ack)
        self._book.settle(m.delivery_tag, ok, multiple=m.multiple, detail="" if ok else "nack")
        self._wake()

    def _on_return(self, _ch: Any, method: Any, props: Any, _body: bytes) -> None:
        if props.message_id:
            self._book.returned(props.message_id, f"returned: {method.reply_text}", self.confirms)

    def _on_close(self, _ch: Any, reason: BaseException) -> None:
        self._book.fail_all(f"channel closed: {reason}")
        self._wake()

    def _wake(self) -> None:
        # process_data_events only returns early for *its* events; arm a 0 s timer so a
        # confirm arriving inside it ends the wait at once.
        if not self._wake_armed and self._a._conn is not None and self._a._conn.is_open:
            self._wake_armed = True
            self._a._conn.call_later(0, self._unarm)

    def _unarm(self) -> None:
        self._wake_armed = False

    def publish(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        flush: bool = True,
    ) -> int:
        hdrs, t_ns = publish_headers(headers)
        # only what a consumer reads: the id, the ns publish time, persistence when asked for
        # (each extra property costs encode time on the hot path; transient is the default)
        props = pika.BasicProperties(
            message_id=msg_id,
            delivery_mode=2 if self.persistent else None,
            headers=hdrs,
        )
        if self.destination.kind == "queue":
            exchange, key = "", self.destination.name
        else:
            exchange = self.destination.name
            key = routing_key if routing_key is not None else self.destination.routing_key
        with self._a.translate(f"publish {msg_id!r} to {self.destination.name!r}"):
            if not self._ch.is_open:
                raise ConnectionLost(f"producer channel closed on {self._a.where}")
            if self.confirms:
                self._tag += 1
                self._book.add(self._tag, msg_id)
            if flush:
                self._ch.basic_publish(exchange, key, body, props, mandatory=self.mandatory)
            else:  # frames wait in pika's output buffer; `flush` (one poll round) sends them
                self._ch._impl.basic_publish(exchange, key, body, props, self.mandatory)
        return t_ns

    def flush(self) -> None:
        self._a.pump(0)

    def close(self) -> None:
        if self._ch.is_open:
            with suppress(*_CONN_ERRORS):
                self._ch.close()
