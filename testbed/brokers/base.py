"""The broker adapter contract: a small Protocol, capabilities, declarations and deliveries.

`Capabilities`, what an adapter can do, is defined in `testbed.brokers.capabilities` and
re-exported here with the rest of the contract.

Adapters only translate between this vocabulary and one client library (OpenMessaging Benchmark
driver / kombu transport style). Rates, timing, retries and statistics belong to the framework.

Threading: an adapter and every producer, consumer and delivery made from it belong to the
thread (or gevent greenlet) that created them. The one exception is settling a delivery
(`Delivery.ack/nack/reject`), which adapters accept from any thread and marshal to the owner
(pika: ``connection.add_callback_threadsafe``); a marshalled settlement takes effect the next time
the owner calls `drain`, `poll_confirms` or `publish`.

Consumers are pull-based: `Consumer.drain(timeout)` runs the client's I/O for at most `timeout`
seconds and returns the deliveries received so far. That shape works in a plain thread, in a
Locust task (gevent greenlet: waiting yields to other greenlets) and in a test.
"""

from __future__ import annotations

__all__ = [
    "AckMode",
    "AdapterError",
    "AlreadySettled",
    "BindingDecl",
    "BrokerAdapter",
    "Capabilities",
    "Confirm",
    "ConfirmTimeout",
    "ConnectionLost",
    "Consumer",
    "Declaration",
    "DeclarationError",
    "Delivery",
    "Destination",
    "ExchangeDecl",
    "HDR_MSG_ID",
    "HDR_T_PUBLISH_NS",
    "Producer",
    "QueueDecl",
    "UnsupportedFeature",
    "parse_publish_ns",
    "sort_declarations",
]

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from testbed.brokers.capabilities import Capabilities
from testbed.exceptions import BrokerError

HDR_T_PUBLISH_NS = "x-mqbed-t-publish-ns"
"""Header carrying the publish time as integer nanoseconds (`time.time_ns()`)."""
HDR_MSG_ID = "x-mqbed-msg-id"
"""Header carrying the message id where the protocol has no message-id property (STOMP)."""

AckMode = Literal["auto", "manual"]
ExchangeType = Literal["direct", "topic", "fanout"]


# --- errors -------------------------------------------------------------------------------------


class AdapterError(BrokerError):
    """A broker adapter operation failed."""


class ConnectionLost(AdapterError):
    """The connection to the broker is gone (or never came up). Reconnect to go on."""


class UnsupportedFeature(AdapterError):
    """The broker/client cannot do what was asked; `Capabilities` says so beforehand."""


class DeclarationError(AdapterError, ValueError):
    """A declaration is invalid, or the broker refused it (e.g. redeclared with other args)."""


class ConfirmTimeout(AdapterError):
    """`publish_and_wait` saw no confirm in time. The id stays pending: a late confirm still
    shows up in `poll_confirms`."""


class AlreadySettled(AdapterError):
    """A delivery was acked, nacked or rejected twice, or settled under ack_mode='auto'."""


# --- declarations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueDecl:
    """A queue. `dead_letter_to` names the *queue* rejected/expired messages go to."""

    name: str
    durable: bool = True
    kind: Literal["classic", "quorum"] = "classic"
    dead_letter_to: str | None = None
    max_length: int | None = None
    exclusive: bool = False
    auto_delete: bool = False
    message_ttl: float | None = None
    """Seconds a message may wait before it expires (dead-lettered if `dead_letter_to`)."""
    single_active_consumer: bool = False
    """One consumer at a time receives, in queue order; the others stand by and the next takes
    over when it goes (RabbitMQ ``x-single-active-consumer``; ActiveMQ: every consumer of the
    queue subscribes exclusive, ``activemq.exclusive``)."""

    def __post_init__(self) -> None:
        if self.message_ttl is not None and self.message_ttl < 0:
            raise DeclarationError(
                f"QueueDecl({self.name!r}).message_ttl: must be >= 0 s, got {self.message_ttl!r}"
            )
        if not self.name:
            raise DeclarationError("QueueDecl.name: empty queue name")
        if self.kind not in ("classic", "quorum"):
            raise DeclarationError(f"QueueDecl({self.name!r}).kind: unknown {self.kind!r}")
        if self.kind == "quorum" and (not self.durable or self.exclusive or self.auto_delete):
            raise DeclarationError(
                f"QueueDecl({self.name!r}): a quorum queue must be durable, non-exclusive and "
                f"not auto-delete (durable={self.durable}, exclusive={self.exclusive}, "
                f"auto_delete={self.auto_delete})"
            )
        if self.max_length is not None and self.max_length < 1:
            raise DeclarationError(
                f"QueueDecl({self.name!r}).max_length: must be >= 1, got {self.max_length!r}"
            )


@dataclass(frozen=True)
class ExchangeDecl:
    """An exchange (RabbitMQ) or its mapping on other brokers (see each adapter)."""

    name: str
    type: ExchangeType = "direct"
    durable: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise DeclarationError("ExchangeDecl.name: empty exchange name")
        if self.type not in ("direct", "topic", "fanout"):
            raise DeclarationError(f"ExchangeDecl({self.name!r}).type: unknown {self.type!r}")


@dataclass(frozen=True)
class BindingDecl:
    """Route messages published to `exchange` with a matching key into `queue`."""

    exchange: str
    queue: str
    routing_key: str = ""


Declaration = QueueDecl | ExchangeDecl | BindingDecl


def sort_declarations(decls: Iterable[Declaration]) -> list[Declaration]:
    """Exchanges, then queues, then bindings (each in given order); reject foreign objects."""
    order = {ExchangeDecl: 0, QueueDecl: 1, BindingDecl: 2}
    items = list(decls)
    for d in items:
        if type(d) not in order:
            raise DeclarationError(f"declare: not a declaration: {d!r}")
    return sorted(items, key=lambda d: order[type(d)])


@dataclass(frozen=True)
class Destination:
    """Where a producer sends: a queue, or an exchange with a default routing key."""

    kind: Literal["queue", "exchange"]
    name: str
    routing_key: str = ""

    @classmethod
    def queue(cls, name: str) -> Destination:
        return cls("queue", name)

    @classmethod
    def exchange(cls, name: str, routing_key: str = "") -> Destination:
        return cls("exchange", name, routing_key)

    @classmethod
    def of(cls, value: Destination | str) -> Destination:
        """A `Destination` as is; a plain string is a queue name."""
        if isinstance(value, Destination):
            return value
        if isinstance(value, str) and value:
            return cls.queue(value)
        raise AdapterError(f"destination: expected a Destination or queue name, got {value!r}")


# --- confirms -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Confirm:
    """The broker's answer to one publish. `msg_id` is '' when the broker confirmed something
    the adapter never sent (then `ok` is False and `detail` names the tag)."""

    msg_id: str
    ok: bool
    t_ns: int
    detail: str = ""
    returned: bool = False
    """The broker returned the message as unroutable (``mandatory``): no queue took it. A
    producer without confirms gets such a failed `Confirm` too, for the returns alone."""


# --- deliveries ---------------------------------------------------------------------------------

Settle = Callable[["Delivery", str, bool], None]
"""Adapter hook: settle(delivery, action in {'ack','nack','reject'}, requeue)."""


def parse_publish_ns(value: object) -> int | None:
    """The publish-time header as int ns; None when absent or unparseable."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


@dataclass
class Delivery:
    """One delivery attempt of one message to one consumer."""

    body: bytes
    headers: dict[str, Any]
    msg_id: str
    redelivered: bool
    t_publish_ns: int | None
    t_receive_ns: int
    delivery_tag: Any
    queue: str
    _settle: Settle | None = field(default=None, repr=False)
    outcome: str | None = None
    """None until settled, then 'acked' | 'nacked' | 'requeued' | 'rejected' | 'auto'."""

    def __post_init__(self) -> None:
        if self._settle is None:
            self.outcome = "auto"

    def ack(self) -> None:
        self._do("ack", False, "acked")

    def nack(self, requeue: bool = True) -> None:
        self._do("nack", requeue, "requeued" if requeue else "nacked")

    def reject(self) -> None:
        self._do("reject", False, "rejected")

    def _do(self, action: str, requeue: bool, outcome: str) -> None:
        if self.outcome is not None:
            raise AlreadySettled(
                f"delivery of msg_id={self.msg_id!r} (tag {self.delivery_tag!r}) on queue "
                f"{self.queue!r} is already {self.outcome}; cannot {action}"
            )
        assert self._settle is not None
        self._settle(self, action, requeue)
        self.outcome = outcome


# --- the protocol -------------------------------------------------------------------------------


@runtime_checkable
class Producer(Protocol):
    """Publishes to one destination. Confirms (when enabled) are collected asynchronously."""

    def publish(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        flush: bool = True,
    ) -> int:
        """Send one message; returns the publish time (ns) written to `HDR_T_PUBLISH_NS`
        (the caller's value if `headers` already has one). ``flush=False`` lets the adapter
        keep the frames in its output buffer until the next `flush` (or flushing publish):
        a generator that is behind schedule sends a burst with one I/O round."""
        ...

    def flush(self) -> None:
        """Write buffered publishes now (no-op for adapters that always write at once)."""
        ...

    def poll_confirms(self, timeout: float = 0.0) -> list[Confirm]:
        """Confirms that arrived; waits up to `timeout` s for the first if none is ready."""
        ...

    def publish_and_wait(
        self,
        body: bytes,
        *,
        msg_id: str,
        headers: Mapping[str, Any] | None = None,
        routing_key: str | None = None,
        timeout: float = 5.0,
    ) -> Confirm:
        """Publish and block until this message is confirmed (raises `ConfirmTimeout`)."""
        ...

    @property
    def in_flight(self) -> int:
        """Published, not yet confirmed."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Consumer(Protocol):
    """Receives from one queue; deliveries are pulled with `drain`."""

    queue: str

    def drain(self, timeout: float, max_messages: int | None = None) -> list[Delivery]:
        """Deliveries received so far; waits up to `timeout` s for the first if none is ready."""
        ...

    @property
    def unsettled(self) -> int:
        """Delivered to this consumer (manual ack), not yet acked/nacked/rejected."""
        ...

    def cancel(self) -> None:
        """Stop new deliveries; unacked ones stay with this consumer until settled or closed."""
        ...

    def close(self) -> None:
        """Cancel and give every unacked message back to the broker (redelivered later)."""
        ...


@runtime_checkable
class BrokerAdapter(Protocol):
    """One broker + client library behind five methods."""

    capabilities: ClassVar[Capabilities]
    connection_errors: ClassVar[tuple[type[BaseException], ...]]

    def connect(self) -> None: ...

    def declare(self, decls: Iterable[Declaration]) -> None:
        """Create exchanges, queues, bindings (idempotent; call it in every process)."""
        ...

    def producer(
        self,
        destination: Destination | str,
        *,
        persistent: bool = False,
        confirms: bool = False,
        mandatory: bool = False,
    ) -> Producer: ...

    def consumer(
        self,
        queue: str,
        *,
        prefetch: int = 100,
        ack_mode: AckMode = "manual",
        declare: Sequence[Declaration] = (),
    ) -> Consumer:
        """``declare``: what this consumer declares on its own connection before it consumes,
        and again whenever the adapter reconnects on its own: a transient queue (``exclusive``/
        ``auto_delete``) and its bindings, which live and die with that connection."""
        ...

    def close(self) -> None: ...

    def abort(self) -> None:
        """Drop the TCP connection at once, as a dying process's kernel would (no protocol
        close, nothing flushed): the broker requeues every unacked delivery. Never raises."""
        ...
