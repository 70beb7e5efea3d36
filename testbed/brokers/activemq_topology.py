"""How AMQP-shaped declarations live on ActiveMQ (see `testbed.brokers.activemq` for the
contract): Virtual Topics for fanout exchanges, client-side routing into composite
destinations for direct/topic exchanges, and the queue-name mapping both ways.

No STOMP here: the stats poller uses the name mapping without a connection.
"""

from __future__ import annotations

__all__ = ["ACTIVEMQ_DLQ", "ActiveMQTopology", "logical_queue_name", "physical_queue_name"]

from collections.abc import Iterable

from testbed.brokers.base import (
    BindingDecl,
    Declaration,
    DeclarationError,
    Destination,
    ExchangeDecl,
    QueueDecl,
    UnsupportedFeature,
    sort_declarations,
)
from testbed.core.routing import topic_matches

ACTIVEMQ_DLQ = "ActiveMQ.DLQ"

_ESC = {"%": "%25", ".": "%2E", "*": "%2A", ">": "%3E", ",": "%2C"}


def _esc(word: str) -> str:
    return "".join(_ESC.get(c, c) for c in word)


def _unesc(word: str) -> str:
    for plain, coded in reversed(list(_ESC.items())):
        word = word.replace(coded, plain)
    return word


def physical_queue_name(queue: str, fanout_exchange: str | None = None) -> str:
    """The ActiveMQ queue behind logical `queue` (bound to `fanout_exchange`, if any)."""
    if fanout_exchange is None:
        return queue
    return f"Consumer.{_esc(queue)}.VirtualTopic.{_esc(fanout_exchange)}"


def logical_queue_name(physical: str) -> str:
    """Inverse of `physical_queue_name` (plain queue names come back unchanged)."""
    parts = physical.split(".")
    if len(parts) >= 4 and parts[0] == "Consumer" and parts[2] == "VirtualTopic":
        return _unesc(parts[1])
    return physical


class ActiveMQTopology:
    """Declared exchanges and bindings of one process, and where each logical queue lives."""

    def __init__(self) -> None:
        self.exchanges: dict[str, ExchangeDecl] = {}
        self.bindings: dict[str, list[BindingDecl]] = {}
        self._physical: dict[str, str] = {}
        self.transient: dict[str, str] = {}
        """Transient queues (``exclusive``/``auto_delete``) -> the topic their subscription reads:
        the queue's own name, or the Virtual Topic of the fanout exchange it is bound to."""
        self.single_active: set[str] = set()
        """Queues declared ``single_active_consumer``: their consumers subscribe exclusive."""

    def physical(self, queue: str) -> str:
        return self._physical.get(queue, queue)

    def add(self, decls: Iterable[Declaration]) -> list[str]:
        """Validate and record `decls`; returns the physical queues to create on the broker."""
        ordered = sort_declarations(decls)
        for d in ordered:
            if isinstance(d, ExchangeDecl):
                self.exchanges[d.name] = d
            elif isinstance(d, QueueDecl):
                self._check_queue(d)
                if d.exclusive or d.auto_delete:
                    self.transient.setdefault(d.name, _esc(d.name))
                if d.single_active_consumer:
                    self.single_active.add(d.name)
            elif isinstance(d, BindingDecl):
                self._bind(d)
        return [
            self.physical(d.name)
            for d in ordered
            if isinstance(d, QueueDecl) and d.name not in self.transient
        ]

    def _check_queue(self, q: QueueDecl) -> None:
        bad = {
            "kind": q.kind if q.kind != "classic" else None,
            "max_length": q.max_length,
            "message_ttl": q.message_ttl,
            "dead_letter_to": q.dead_letter_to if q.dead_letter_to != ACTIVEMQ_DLQ else None,
        }
        for fld, value in bad.items():
            if value is not None:
                raise UnsupportedFeature(
                    f"QueueDecl({q.name!r}).{fld}={value!r} is not supported on ActiveMQ over "
                    f"STOMP (see ActiveMQAdapter.capabilities)"
                )

    def _bind(self, b: BindingDecl) -> None:
        x = self.exchanges.get(b.exchange)
        if x is None:
            raise DeclarationError(f"{b!r}: exchange {b.exchange!r} is not declared")
        if b.queue in self.transient:
            if x.type != "fanout":
                raise UnsupportedFeature(
                    f"{b!r}: on ActiveMQ a transient queue is a topic subscription; it can "
                    f"follow a fanout exchange, not the {x.type} exchange {x.name!r}"
                )
            self.transient[b.queue] = f"VirtualTopic.{_esc(x.name)}"
            return
        if x.type == "fanout":
            phys = physical_queue_name(b.queue, b.exchange)
            old = self._physical.get(b.queue)
            if old is not None and old != phys:
                raise UnsupportedFeature(
                    f"{b!r}: queue {b.queue!r} is already bound to a fanout exchange as {old!r}; "
                    f"on ActiveMQ a queue can follow one fanout exchange"
                )
            self._physical[b.queue] = phys
        bindings = self.bindings.setdefault(b.exchange, [])
        if b not in bindings:
            bindings.append(b)

    def subscription_headers(self, queue: str, prefetch: int) -> dict[str, str]:
        """A consumer's SUBSCRIBE headers: its prefetch and, on a single-active-consumer queue,
        ``activemq.exclusive`` (the broker sends to one exclusive consumer at a time, in queue
        order; the next takes over when it goes)."""
        headers = {"activemq.prefetchSize": str(prefetch)}
        if queue in self.single_active:
            headers["activemq.exclusive"] = "true"
        return headers

    def subscription(self, queue: str) -> str:
        """The STOMP destination a consumer of `queue` subscribes to."""
        topic = self.transient.get(queue)
        return f"/topic/{topic}" if topic is not None else f"/queue/{self.physical(queue)}"

    def route(self, dest: Destination, routing_key: str | None) -> str | None:
        """STOMP destination for one message; None when a direct/topic route matches nothing."""
        if dest.kind == "queue":
            return self.subscription(dest.name)
        x = self.exchanges[dest.name]
        if x.type == "fanout":
            return f"/topic/VirtualTopic.{_esc(x.name)}"
        key = routing_key if routing_key is not None else dest.routing_key
        queues: list[str] = []
        for b in self.bindings.get(x.name, []):
            hit = topic_matches(b.routing_key, key) if x.type == "topic" else b.routing_key == key
            if hit and b.queue not in queues:
                queues.append(b.queue)
        return ",".join(f"/queue/{self.physical(q)}" for q in queues) or None
