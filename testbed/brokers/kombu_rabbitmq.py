"""RabbitMQ adapter over kombu (py-amqp transport): how Celery users talk to RabbitMQ.

Same contract and declarations as the pika adapter (`testbed.brokers.rabbitmq`), plus kombu's
recovery machinery: publishing goes through ``Connection.ensure(...)`` and I/O failures through
``ensure_connection(...)``, so producers and consumers survive a broker restart without the
caller reconnecting (``capabilities.auto_reconnect``). After a reconnect:

- every producer/consumer gets a fresh channel (confirm mode, basic.qos, basic.consume redone)
  the next time it is used (a generation counter marks stale ones);
- publishes that were awaiting a confirm are reported as failed confirms
  (``detail='connection lost before confirm'``): the broker may or may not have them;
- deliveries handed out before the reconnect cannot be settled (`AdapterError`): the broker
  already requeued them and will redeliver them with ``redelivered=True``.

Confirms are asynchronous: ``confirm_select`` on the producer's own channel and py-amqp's
``basic_ack``/``basic_nack``/``basic_return`` channel events, matched by delivery tag.
Deliveries settled from another thread are queued and applied on the owner's next call.
"""

from __future__ import annotations

__all__ = ["KombuRabbitMQAdapter"]

import collections
import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import amqp.exceptions
import kombu
import kombu.exceptions

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
    sort_declarations,
)
from testbed.brokers.common import PumpedProducer, shut_socket
from testbed.brokers.kombu_consumer import KOMBU_ERRORS as _CONN_ERRORS
from testbed.brokers.kombu_consumer import KombuConsumer
from testbed.brokers.rabbitmq import RABBITMQ_CAPABILITIES, publish_headers, queue_arguments


def _entity(d: Declaration) -> Any:
    """The kombu entity for a declaration (bindings: a no-declare Queue bound to the exchange)."""
    if isinstance(d, ExchangeDecl):
        return kombu.Exchange(d.name, type=d.type, durable=d.durable)
    if isinstance(d, QueueDecl):
        return kombu.Queue(
            d.name,
            durable=d.durable,
            exclusive=d.exclusive,
            auto_delete=d.auto_delete,
            queue_arguments=queue_arguments(d) or None,
        )
    return kombu.Queue(
        d.queue, exchange=kombu.Exchange(d.exchange), routing_key=d.routing_key, no_declare=True
    )


class KombuRabbitMQAdapter:
    """`BrokerAdapter` for RabbitMQ through kombu, reconnecting on its own."""

    capabilities: ClassVar[Capabilities] = dataclasses.replace(
        RABBITMQ_CAPABILITIES, auto_reconnect=True
    )
    connection_errors: ClassVar[tuple[type[BaseException], ...]] = (ConnectionLost, *_CONN_ERRORS)

    def __init__(
        self,
        endpoint: BrokerEndpoint,
        *,
        reconnect_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        heartbeat: int = 0,
    ) -> None:
        if endpoint.kind != "rabbitmq":
            raise AdapterError(
                f"KombuRabbitMQAdapter: endpoint {endpoint.name!r} is {endpoint.kind!r}"
            )
        self.endpoint = endpoint
        self.where = f"rabbitmq {endpoint.name} at {endpoint.host}:{endpoint.port} (kombu)"
        self.reconnect_timeout = reconnect_timeout
        self.retry_policy: dict[str, Any] = {
            "max_retries": max(1, int(reconnect_timeout / 0.5)),
            "interval_start": 0.2,
            "interval_step": 0.3,
            "interval_max": 1.0,
        }
        self.conn = kombu.Connection(
            hostname=endpoint.host,
            port=endpoint.port,
            userid=endpoint.username,
            password=endpoint.password,
            virtual_host=endpoint.vhost,
            transport="pyamqp",
            connect_timeout=connect_timeout,
            heartbeat=heartbeat,
        )
        self.generation = 0
        self.reconnects = 0
        self.owner = threading.get_ident()
        self.deferred: collections.deque[Callable[[], None]] = collections.deque()
        self._decl_ch: Any = None
        self._decl_gen = -1

    def connect(self) -> None:
        try:
            self.conn.ensure_connection(timeout=self.reconnect_timeout, **self.retry_policy)
        except _CONN_ERRORS as e:
            raise ConnectionLost(f"connect to {self.where}: {e!r}") from e
        self.owner = threading.get_ident()

    def recover(self, why: BaseException | None = None) -> None:
        """Re-establish the connection (kombu retry policy); stale channels revive lazily."""
        self.conn.collect()
        try:
            self.conn.ensure_connection(timeout=self.reconnect_timeout, **self.retry_policy)
        except _CONN_ERRORS as e:
            raise ConnectionLost(f"reconnect to {self.where} after {why!r}: {e!r}") from e
        self.generation += 1
        self.reconnects += 1
        self.deferred.clear()

    def io(self, timeout: float) -> None:
        """Apply deferred settlements, then read frames for up to `timeout` s; recover on loss."""
        try:
            while self.deferred:
                self.deferred.popleft()()
            self.conn.drain_events(timeout=max(timeout, 0.0))
        except TimeoutError:
            pass
        except _CONN_ERRORS as e:
            self.recover(e)

    def declare(self, decls: Iterable[Declaration]) -> None:
        """Declare through ``Connection.autoretry`` on a declaration channel. A broker refusal
        (channel error) is not retried: it raises `DeclarationError` at once."""
        for d in sort_declarations(decls):
            ent = _entity(d)

            def do(d: Declaration = d, ent: Any = ent, channel: Any = None) -> None:
                try:
                    bound = ent(channel)
                    bound.queue_bind() if isinstance(d, BindingDecl) else bound.declare()
                except amqp.exceptions.ChannelError as e:
                    raise DeclarationError(f"{self.where} refused {d!r}: {e}") from e

            try:
                _, self._decl_ch = self.conn.autoretry(
                    do, channel=self._decl_channel(), on_revive=self._revived, **self.retry_policy
                )()
            except _CONN_ERRORS as e:
                raise ConnectionLost(f"declare {d!r} on {self.where}: {e!r}") from e

    def _decl_channel(self) -> Any:
        ch = self._decl_ch
        if ch is None or not ch.is_open or self._decl_gen != self.generation:
            try:
                ch = self.conn.channel()
            except _CONN_ERRORS as e:
                self.recover(e)
                ch = self.conn.channel()
            self._decl_ch, self._decl_gen = ch, self.generation
        return ch

    def _revived(self, channel: Any) -> None:
        """kombu reconnected inside ensure/autoretry: every other channel is stale now."""
        self.generation += 1
        self.reconnects += 1
        self._decl_ch, self._decl_gen = channel, self.generation

    def producer(
        self,
        destination: Destination | str,
        *,
        persistent: bool = False,
        confirms: bool = False,
        mandatory: bool = False,
    ) -> KombuProducer:
        return KombuProducer(self, Destination.of(destination), persistent, confirms, mandatory)

    def consumer(
        self,
        queue: str,
        *,
        prefetch: int = 100,
        ack_mode: AckMode = "manual",
        declare: Sequence[Declaration] = (),
    ) -> KombuConsumer:
        if ack_mode not in ("auto", "manual"):
            raise AdapterError(f"consumer({queue!r}).ack_mode: unknown {ack_mode!r}")
        return KombuConsumer(self, queue, prefetch, ack_mode, list(declare))

    def close(self) -> None:
        with contextlib.suppress(*_CONN_ERRORS):
            self.conn.release()

    def abort(self) -> None:
        raw = getattr(self.conn, "_connection", None)  # py-amqp Connection, if connected
        shut_socket(getattr(getattr(raw, "transport", None), "sock", None))
        with contextlib.suppress(Exception):  # kombu's own state; the socket is gone already
            self.conn.release()


class KombuProducer(PumpedProducer):
    """A kombu Producer on its own channel; `publish` is wrapped in ``Connection.ensure``."""

    def __init__(
        self,
        adapter: KombuRabbitMQAdapter,
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
        self._gen = -1
        self._channel: Any = None
        self._producer: kombu.Producer | None = None
        self._ensured_publish = adapter.conn.ensure(self, self._raw_publish, **adapter.retry_policy)
        self._ensure_channel()

    # kombu `ensure` contract: revive(channel) after a reconnect. We take our own channel.
    def revive(self, default_channel: Any) -> None:
        self._a._revived(default_channel)
        self._ensure_channel()

    def _ensure_channel(self) -> None:
        if self._gen == self._a.generation and self._channel is not None:
            return
        if self._channel is not None:
            self._book.fail_all("connection lost before confirm")
        ch = self._a.conn.channel()
        if self.confirms:
            ch.confirm_select()
            ch.events["basic_ack"].add(self._on_ack)
            ch.events["basic_nack"].add(self._on_nack)
        ch.events["basic_return"].add(self._on_return)
        self._channel, self._tag, self._gen = ch, 0, self._a.generation
        self._producer = kombu.Producer(ch, auto_declare=False)

    def _on_ack(self, tag: int, multiple: bool) -> None:
        self._book.settle(tag, True, multiple=multiple)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        self._book.settle(tag, False, multiple=multiple, detail="nack")

    def _on_return(self, exc: Any, _exchange: str, _key: str, message: Any) -> None:
        msg_id = message.properties.get("message_id")
        if msg_id:
            self._book.returned(msg_id, f"returned: {exc}", self.confirms)

    def _pump(self, timeout: float) -> None:
        self._a.io(timeout)
        self._ensure_channel()

    def _raw_publish(self, body: bytes, msg_id: str, headers: dict[str, Any], key: str) -> None:
        self._ensure_channel()
        assert self._producer is not None
        exchange = "" if self.destination.kind == "queue" else self.destination.name
        tag = 0
        if self.confirms:
            self._tag = tag = self._tag + 1
            self._book.add(tag, msg_id)
        try:
            self._producer.publish(
                body, exchange=exchange, routing_key=key, headers=headers, message_id=msg_id,
                content_type="application/octet-stream", content_encoding="binary",
                delivery_mode=2 if self.persistent else 1, mandatory=self.mandatory, retry=False,
                timestamp=headers[HDR_T_PUBLISH_NS] // 1_000_000_000,
            )  # fmt: skip
        except BaseException:
            self._book.discard(tag)  # ensure() retries it on a new channel with a new tag
            raise

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
        if self.destination.kind == "queue":
            key = self.destination.name
        else:
            key = routing_key if routing_key is not None else self.destination.routing_key
        try:
            self._ensured_publish(body, msg_id, hdrs, key)
        except _CONN_ERRORS as e:
            raise ConnectionLost(f"publish {msg_id!r} on {self._a.where}: {e!r}") from e
        return t_ns

    def close(self) -> None:
        if self._channel is not None and self._gen == self._a.generation:
            with contextlib.suppress(*_CONN_ERRORS, amqp.exceptions.ChannelError):
                self._channel.close()
        self._channel = None
