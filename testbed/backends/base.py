"""The shape every backend hands to the rest of mqbed: where a broker is and how to log in."""

from __future__ import annotations

__all__ = ["BrokerEndpoint", "BrokerKind"]

from dataclasses import asdict, dataclass, field
from typing import Any

from testbed.core.broker_kinds import KindName

BrokerKind = KindName
"""The registered broker kinds (`testbed.core.broker_kinds`)."""


@dataclass(frozen=True)
class BrokerEndpoint:
    """A running broker as clients see it. All addresses are on 127.0.0.1.

    `port` is the messaging port: AMQP for RabbitMQ, STOMP for ActiveMQ.
    `management_url` is RabbitMQ's management HTTP API base (``http://127.0.0.1:P``) or
    ActiveMQ's web console when enabled; `prometheus_url` is RabbitMQ's prometheus plugin base.
    `pid` is the broker's process (local backend) and `pgid` its process group; both are
    ``None`` for brokers mqbed does not own (external backend).
    """

    kind: BrokerKind
    name: str
    host: str
    port: int
    username: str
    password: str
    vhost: str = "/"
    management_url: str | None = None
    prometheus_url: str | None = None
    extra_ports: dict[str, int] = field(default_factory=dict)
    pid: int | None = None
    pgid: int | None = None
    data_dir: str | None = None
    version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerEndpoint:
        return cls(**data)
