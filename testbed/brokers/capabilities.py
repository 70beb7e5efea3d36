"""What an adapter — one broker with one client library — can do: its `Capabilities` record.

Each adapter class declares one (``capabilities``, a class attribute of the `BrokerAdapter`
Protocol in `testbed.brokers.base`): publisher confirms, the exchange types and topic wildcards
it routes, what ``nack`` and ``reject`` do (requeue, dead-lettering to any queue or to the
broker's fixed one), redelivery on disconnect, prefetch, quorum queues, max-length, mandatory
returns, exclusive and auto-delete queues, reconnecting by itself. The framework and the
conformance suite read these fields, never the broker's name, before they ask for a feature.
"""

from __future__ import annotations

__all__ = ["Capabilities"]

from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    """What an adapter (broker + client) can do. The framework checks these before a run."""

    confirms: bool
    """Publisher confirmations, asynchronous, matched to msg ids."""
    exchange_types: frozenset[str]
    """Exchange types `declare` accepts (``direct``, ``topic``, ``fanout``)."""
    topic_wildcards: bool
    """Topic binding keys may contain ``*`` and ``#``."""
    nack_requeue: bool
    """``nack(requeue=True)`` puts one message back at once, redelivered flag set."""
    nack_dead_letters: bool
    """``nack(requeue=False)`` / ``reject()`` moves a message to a dead-letter target."""
    per_queue_dead_letter: bool
    """``QueueDecl.dead_letter_to`` may name any queue."""
    fixed_dead_letter_queue: str | None
    """The broker's own dead-letter queue, when rejected messages go there regardless."""
    dead_letters_transient: bool
    """Transient (non-persistent) messages are dead-lettered too (else dropped)."""
    requeue_on_disconnect: bool
    """Unacked messages return to the queue, redelivered, when the consumer goes away."""
    redelivered_flag: bool
    """Each delivery says whether it was delivered before."""
    prefetch: bool
    quorum_queues: bool
    max_length: bool
    mandatory: bool
    """Unroutable messages can be reported as failed confirms."""
    exclusive_queues: bool
    auto_delete_queues: bool
    auto_reconnect: bool
    """Producers/consumers survive a broker restart without the caller reconnecting."""
