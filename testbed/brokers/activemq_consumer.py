"""The consumer side of the ActiveMQ adapter: one STOMP SUBSCRIBE and its deliveries
(`testbed.brokers.activemq` has the mapping of declarations and the acknowledgement contract)."""

from __future__ import annotations

__all__ = ["StompConsumer"]

import contextlib
import queue as queue_mod
import threading
import time
from typing import TYPE_CHECKING, Any

from testbed.brokers.activemq_topology import ACTIVEMQ_DLQ
from testbed.brokers.base import (
    HDR_MSG_ID,
    HDR_T_PUBLISH_NS,
    AckMode,
    AdapterError,
    ConnectionLost,
    Delivery,
    UnsupportedFeature,
    parse_publish_ns,
)
from testbed.brokers.stomp_session import Subscription

if TYPE_CHECKING:
    from testbed.brokers.activemq import ActiveMQAdapter

_STOMP_HEADERS = frozenset({
    "content-length", "content-type", "expires", "destination", "ack", "subscription",
    "priority", "original-destination", "message-id", "persistent", "timestamp", "redelivered",
    "receipt", "type", "correlation-id", "reply-to", HDR_MSG_ID,
})  # fmt: skip


class StompConsumer:
    """One SUBSCRIBE on the adapter's connection."""

    def __init__(
        self, adapter: ActiveMQAdapter, queue: str, prefetch: int, ack_mode: AckMode
    ) -> None:
        self._a = adapter
        self.queue = queue
        self.ack_mode = ack_mode
        self._unsettled: set[str] = set()
        self._unsettled_lock = threading.Lock()
        self._sub: Subscription | None = adapter.session.subscribe(
            adapter.topology.subscription(queue),
            ack="client-individual" if ack_mode == "manual" else "auto",
            headers=adapter.topology.subscription_headers(queue, prefetch),
        )

    @property
    def unsettled(self) -> int:
        return len(self._unsettled)

    def _delivery(self, frame: Any) -> Delivery:
        h = frame.headers
        manual = self.ack_mode == "manual"
        ack_id = h.get("ack", "")
        if manual:
            with self._unsettled_lock:
                self._unsettled.add(ack_id)
        body = frame.body
        return Delivery(
            body=body if isinstance(body, bytes) else str(body).encode(),
            headers={k: v for k, v in h.items() if k not in _STOMP_HEADERS},
            msg_id=h.get(HDR_MSG_ID, ""),
            redelivered=h.get("redelivered") == "true",
            t_publish_ns=parse_publish_ns(h.get(HDR_T_PUBLISH_NS)),
            t_receive_ns=time.time_ns(),
            delivery_tag=ack_id,
            queue=self.queue,
            _settle=self._settle if manual else None,
        )

    def _settle(self, d: Delivery, action: str, requeue: bool) -> None:
        if action == "nack" and requeue:
            raise UnsupportedFeature(
                f"nack(requeue=True) of msg {d.msg_id!r}: ActiveMQ over STOMP cannot requeue one "
                f"message (NACK dead-letters persistent ones to {ACTIVEMQ_DLQ}); close the "
                f"consumer to requeue its unacked messages"
            )
        if action == "ack":
            self._a.session.ack(d.delivery_tag)
        else:
            self._a.session.nack(d.delivery_tag)
        with self._unsettled_lock:
            self._unsettled.discard(d.delivery_tag)

    def drain(self, timeout: float, max_messages: int | None = None) -> list[Delivery]:
        if self._sub is None:
            raise AdapterError(f"drain on closed consumer of queue {self.queue!r}")
        frames = self._sub.frames
        out: list[Delivery] = []
        limit = max_messages if max_messages is not None else 1 << 30
        try:
            first = frames.get(timeout=timeout) if timeout > 0 else frames.get_nowait()
        except queue_mod.Empty:
            return out
        while first is not None:
            out.append(self._delivery(first))
            if len(out) >= limit:
                return out
            try:
                first = frames.get_nowait()
            except queue_mod.Empty:
                return out
        frames.put(None)  # keep the "lost" marker for the next call
        if out:
            return out
        raise ConnectionLost(f"consumer of queue {self.queue!r}: connection lost ({self._a.where})")

    def cancel(self) -> None:
        """UNSUBSCRIBE. On ActiveMQ this also requeues the unacked messages (STOMP ties acks to
        the subscription), so `cancel` is `close` here."""
        self.close()

    def close(self) -> None:
        sub, self._sub = self._sub, None
        with self._unsettled_lock:
            self._unsettled.clear()
        if sub is not None and self._a.session.alive:
            with contextlib.suppress(*self._a.connection_errors):
                self._a.session.unsubscribe(sub)
