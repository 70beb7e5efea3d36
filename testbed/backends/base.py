"""What every backend offers the rest of mqbed: the `Backend` contract, and the
`BrokerEndpoint` it hands out (where a broker is and how to log in)."""

from __future__ import annotations

__all__ = ["Backend", "BrokerEndpoint", "BrokerKind"]

import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
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


class Backend(ABC):
    """The one contract of a backend: `LocalBackend` (native processes), `DockerBackend`
    (containers) and `ExternalBackend` (brokers given as URLs) implement it, and code that only
    starts, finds or breaks brokers takes a `Backend`, never one of them.

    An ABC rather than a Protocol: there are exactly these implementations, all in
    `testbed.backends`, and an implementation that misses a method then fails when it is
    created (``TypeError``), not in the middle of a run when a fault first calls the method;
    the two backends that own their nodes also share their lifecycle by inheritance
    (`testbed.backends.owned.OwnedBackend`).

    A *node name* is the name of one broker of the testbed as its `BrokerEndpoint.name` says
    (``rabbitmq0``, ``activemq1``, ``external-rabbitmq0``); every node method takes one.
    Failures raise `BackendError` (`BrokerStartError` when a broker did not become healthy in
    time); `NotOwnedError` (a `BackendError`) means "this backend cannot do that": the broker's
    lifecycle is not mqbed's (every fault method and `rabbitmqctl` of `ExternalBackend`).
    """

    home: Path | None
    """The directory holding the backend's state (None: the backend keeps none)."""

    @abstractmethod
    def up(
        self,
        kinds: Sequence[str],
        *,
        nodes: int = 1,
        timeout: float = 60.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
        warm: bool = True,
    ) -> list[BrokerEndpoint]:
        """Start `nodes` brokers of each of `kinds` (reusing running ones), wait ≤ `timeout` s
        until healthy; return the endpoints of those kinds. `detach=False`: they are stopped
        when this process exits; `warm`: a new broker of a kind with a JIT compiler is warmed
        up first (`testbed.backends.warm_up`). (Each backend has its own default `timeout`.)"""

    @abstractmethod
    def down(self, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        """Stop and forget every node of the testbed; return the names of the nodes stopped
        ([] when there were none: idempotent). Node data goes unless `keep_data`."""

    @abstractmethod
    def endpoints(self) -> list[BrokerEndpoint]:
        """The endpoints of every node the backend knows (stopped or killed ones included)."""

    @abstractmethod
    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        """Stop node `name` gracefully (SIGKILL after `timeout` s); it stays known."""

    @abstractmethod
    def kill_node(self, name: str) -> float | None:
        """Crash node `name` (SIGKILL); it stays known and down until `restart_node`. Returns
        the seconds from the signal until the process was gone — its sockets stay open until
        then (`restart_time.kill_s`) — or None when the backend cannot tell."""

    @abstractmethod
    def pause_node(self, name: str) -> None:
        """Freeze node `name`: its ports still accept, nothing answers, until `resume_node`."""

    @abstractmethod
    def resume_node(self, name: str) -> None:
        """Thaw node `name` after `pause_node`."""

    @abstractmethod
    def restart_node(self, name: str, timeout: float = 60.0) -> BrokerEndpoint:
        """Stop node `name` if it runs, start it on the same ports, data and node name, wait
        ≤ `timeout` s for health; return its endpoint (a new pid). (Per-backend default.)"""

    @abstractmethod
    def is_healthy(self, name: str, timeout: float = 2.0) -> bool:
        """Whether node `name` answers its health probe within `timeout` s (never raises for
        a node that is down; `BackendError` for a name the backend does not know)."""

    @abstractmethod
    def rabbitmqctl(
        self, name: str, *args: str, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl ARGS`` against RabbitMQ node `name`; its completed process
        (a non-zero return code is not raised). `BackendError` for a non-RabbitMQ node."""

    def close(self) -> None:  # noqa: B027 - optional: only a backend holding a connection
        """Release what the backend object holds (an API connection); brokers are untouched."""
