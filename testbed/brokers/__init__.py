"""Broker adapters: one per broker/client library behind the `BrokerAdapter` Protocol.

``make_adapter(endpoint, client)`` picks the adapter; the client libraries are imported only
when their adapter is asked for.

- rabbitmq + ``pika`` (default): `testbed.brokers.rabbitmq.RabbitMQAdapter`
- rabbitmq + ``kombu``: `testbed.brokers.kombu_rabbitmq.KombuRabbitMQAdapter` (reconnects itself)
- activemq + ``stomp`` (default): `testbed.brokers.activemq.ActiveMQAdapter`

Which clients a kind has, and which adapter serves each, is registered with the kind in
`testbed.core.broker_kinds`.
"""

from __future__ import annotations

__all__ = [
    "CLIENTS",
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
    "DeclarationError",
    "Delivery",
    "Destination",
    "ExchangeDecl",
    "Producer",
    "QueueDecl",
    "UnsupportedFeature",
    "adapter_class",
    "make_adapter",
]

from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.brokers.base import (
    AckMode,
    AdapterError,
    AlreadySettled,
    BindingDecl,
    BrokerAdapter,
    Capabilities,
    Confirm,
    ConfirmTimeout,
    ConnectionLost,
    Consumer,
    DeclarationError,
    Delivery,
    Destination,
    ExchangeDecl,
    Producer,
    QueueDecl,
    UnsupportedFeature,
)
from testbed.core.broker_kinds import KINDS, load
from testbed.exceptions import ConfigurationError

CLIENTS: dict[str, dict[str, str]] = {name: dict(kind.clients) for name, kind in KINDS.items()}
"""broker kind -> client name -> "module:Class"; the first client of each kind is its default
(from the registry, `testbed.core.broker_kinds.KindFacts.clients`)."""


def adapter_class(kind: str, client: str | None = None) -> type[Any]:
    """The adapter class for a broker kind and client name (default client if None)."""
    clients = CLIENTS.get(kind)
    if clients is None:
        raise ConfigurationError(f"broker kind {kind!r}: unknown (known: {sorted(CLIENTS)})")
    name = client or next(iter(clients))
    target = clients.get(name)
    if target is None:
        raise ConfigurationError(
            f"client {name!r} cannot talk to {kind} (choose one of {sorted(clients)})"
        )
    return load(target)  # type: ignore[no-any-return]


def make_adapter(
    endpoint: BrokerEndpoint, client: str | None = None, **options: Any
) -> BrokerAdapter:
    """A not-yet-connected adapter for `endpoint`; call ``connect()`` on it."""
    adapter: BrokerAdapter = adapter_class(endpoint.kind, client)(endpoint, **options)
    return adapter
