"""The consumer side of the kombu RabbitMQ adapter: a kombu Consumer on its own channel,
revived after every reconnect (`testbed.brokers.kombu_rabbitmq` has the adapter, its producers
and the recovery contract)."""

from __future__ import annotations

__all__ = ["KOMBU_ERRORS", "KombuConsumer"]

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

import amqp.exceptions
import kombu
import kombu.exceptions

from testbed.brokers.base import (
    HDR_T_PUBLISH_NS,
    AckMode,
    AdapterError,
    ConnectionLost,
    Declaration,
    Delivery,
    parse_publish_ns,
)
from testbed.brokers.common import PumpedConsumer

if TYPE_CHECKING:
    from testbed.brokers.kombu_rabbitmq import KombuRabbitMQAdapter

KOMBU_ERRORS: tuple[type[BaseException], ...] = (
    amqp.exceptions.ConnectionError,
    amqp.exceptions.RecoverableConnectionError,
    kombu.exceptions.OperationalError,
    OSError,
)
"""kombu's and py-amqp's exceptions that mean the connection is gone (the adapter's too)."""


class KombuConsumer(PumpedConsumer):
    """A kombu Consumer (``on_message``, raw bytes) on its own channel with basic.qos."""

    def __init__(
        self,
        adapter: KombuRabbitMQAdapter,
        queue: str,
        prefetch: int,
        ack_mode: AckMode,
        declare: list[Declaration],
    ) -> None:
        super().__init__()
        self._a = adapter
        self._declare = declare  # declared again on every new connection (transient queue)
        self.queue = queue
        self.prefetch = prefetch
        self.ack_mode = ack_mode
        self._messages: dict[int, tuple[Any, int]] = {}
        self._gen = -1
        self._channel: Any = None
        self._consumer: kombu.Consumer | None = None
        self._cancelled = False
        self._ensure_channel()

    def _ensure_channel(self) -> None:
        if self._cancelled or (self._gen == self._a.generation and self._channel is not None):
            return
        self._buf.clear()
        self._unsettled.clear()
        self._messages.clear()
        if self._declare:
            self._a.declare(self._declare)
        try:
            ch = self._a.conn.channel()
            self._consumer = kombu.Consumer(
                ch,
                queues=[kombu.Queue(self.queue, no_declare=True)],
                on_message=self._on_message,
                no_ack=self.ack_mode == "auto",
                prefetch_count=self.prefetch,
                auto_declare=False,
            )
            self._consumer.consume()
        except amqp.exceptions.ChannelError as e:
            raise AdapterError(f"consume from queue {self.queue!r} on {self._a.where}: {e}") from e
        self._channel, self._gen = ch, self._a.generation

    def _on_message(self, message: Any) -> None:
        headers = dict(message.headers or {})
        manual = self.ack_mode == "manual"
        if manual:
            self._unsettled.add(message.delivery_tag)
        d = Delivery(
            body=message.body,
            headers=headers,
            msg_id=message.properties.get("message_id") or "",
            redelivered=bool(message.delivery_info.get("redelivered")),
            t_publish_ns=parse_publish_ns(headers.get(HDR_T_PUBLISH_NS)),
            t_receive_ns=time.time_ns(),
            delivery_tag=message.delivery_tag,
            queue=self.queue,
            _settle=self._settle if manual else None,
        )
        if manual:
            self._messages[message.delivery_tag] = (message, self._gen)
        self._buf.append(d)

    def _settle(self, d: Delivery, action: str, requeue: bool) -> None:
        message, gen = self._messages.pop(d.delivery_tag, (None, -1))
        if message is None or gen != self._a.generation:
            raise AdapterError(
                f"{action} of msg {d.msg_id!r}: delivered before a reconnect to {self._a.where}; "
                f"the broker requeued it"
            )

        def call() -> None:
            if action == "ack":
                message.ack()
            else:
                message.reject(requeue=requeue and action == "nack")

        if threading.get_ident() == self._a.owner:
            try:
                call()
            except KOMBU_ERRORS as e:
                raise ConnectionLost(f"{action} msg {d.msg_id!r} on {self._a.where}: {e!r}") from e
        else:
            self._a.deferred.append(call)
        self._unsettled.discard(d.delivery_tag)

    def _pump(self, timeout: float) -> None:
        self._ensure_channel()
        self._a.io(timeout)
        self._ensure_channel()

    def cancel(self) -> None:
        self._cancelled = True
        if self._consumer is not None and self._gen == self._a.generation:
            try:
                self._consumer.cancel()
            except KOMBU_ERRORS as e:
                raise ConnectionLost(f"cancel consumer on {self.queue!r}: {e!r}") from e

    def close(self) -> None:
        self._cancelled = True
        self._buf.clear()
        self._unsettled.clear()
        self._messages.clear()
        if self._channel is not None and self._gen == self._a.generation:
            with contextlib.suppress(*KOMBU_ERRORS, amqp.exceptions.ChannelError):
                self._channel.close()
        self._channel = None
