"""The consumer side of the RabbitMQ adapter: ``basic.consume`` on its own channel
(`testbed.brokers.rabbitmq` has the adapter, its producers and the threading contract)."""

from __future__ import annotations

__all__ = ["PIKA_ERRORS", "PikaConsumer"]

import threading
import time
from contextlib import suppress
from functools import partial
from typing import TYPE_CHECKING, Any

import pika.exceptions as pe

from testbed.brokers.base import (
    HDR_T_PUBLISH_NS,
    AckMode,
    ConnectionLost,
    Delivery,
    parse_publish_ns,
)
from testbed.brokers.common import PumpedConsumer

if TYPE_CHECKING:
    from testbed.brokers.rabbitmq import RabbitMQAdapter

PIKA_ERRORS: tuple[type[BaseException], ...] = (
    pe.AMQPConnectionError,
    pe.ConnectionWrongStateError,
    pe.ChannelWrongStateError,
    pe.StreamLostError,
    OSError,
)
"""pika's exceptions that mean a connection or channel is gone (the adapter's too)."""


class PikaConsumer(PumpedConsumer):
    """basic.consume on its own channel with basic.qos(prefetch)."""

    def __init__(
        self, adapter: RabbitMQAdapter, queue: str, prefetch: int, ack_mode: AckMode
    ) -> None:
        super().__init__()
        self._a = adapter
        self.queue = queue
        self.ack_mode = ack_mode
        self._closed_reason: str | None = None
        self._ch = adapter.channel()
        self._ch._impl.add_on_close_callback(self._on_close)
        with adapter.translate(f"consume from queue {queue!r}"):
            self._ch.basic_qos(prefetch_count=prefetch)
            self._ctag = self._ch.basic_consume(
                queue, self._on_message, auto_ack=(ack_mode == "auto")
            )

    def _on_close(self, _ch: Any, reason: BaseException) -> None:
        self._closed_reason = str(reason)

    def _on_message(self, _ch: Any, method: Any, props: Any, body: bytes) -> None:
        headers = dict(props.headers or {})
        manual = self.ack_mode == "manual"
        if manual:
            self._unsettled.add(method.delivery_tag)
        self._buf.append(
            Delivery(
                body=body,
                headers=headers,
                msg_id=props.message_id or "",
                redelivered=bool(method.redelivered),
                t_publish_ns=parse_publish_ns(headers.get(HDR_T_PUBLISH_NS)),
                t_receive_ns=time.time_ns(),
                delivery_tag=method.delivery_tag,
                queue=self.queue,
                _settle=self._settle if manual else None,
            )
        )

    def _settle(self, d: Delivery, action: str, requeue: bool) -> None:
        tag = d.delivery_tag
        if action == "ack":
            call = partial(self._ch.basic_ack, tag)
        elif action == "nack":
            call = partial(self._ch.basic_nack, tag, requeue=requeue)
        else:
            call = partial(self._ch.basic_reject, tag, requeue=False)
        with self._a.translate(f"{action} msg {d.msg_id!r} on queue {self.queue!r}"):
            if threading.get_ident() == self._a.owner:
                call()
            else:
                self._a.connection.add_callback_threadsafe(call)
        self._unsettled.discard(tag)

    def _pump(self, timeout: float) -> None:
        self._check_open()
        self._a.pump(timeout)

    def _check_open(self) -> None:
        if self._closed_reason is not None or not self._ch.is_open:
            raise ConnectionLost(
                f"consumer channel on queue {self.queue!r} closed ({self._closed_reason}) "
                f"on {self._a.where}"
            )

    def cancel(self) -> None:
        if self._ch.is_open:
            with self._a.translate(f"cancel consumer on {self.queue!r}"):
                self._ch.basic_cancel(self._ctag)

    def close(self) -> None:
        self._buf.clear()
        self._unsettled.clear()
        if self._ch.is_open:
            with suppress(*PIKA_ERRORS):
                self._ch.close()
