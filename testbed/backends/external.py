"""The external backend: brokers someone else runs, given as URLs. No lifecycle, no faults.

Accepted URLs (credentials percent-encoded where needed)::

    amqp://user:pass@127.0.0.1:5672/vhost          RabbitMQ (vhost "/" when the path is empty;
                                                   "%2F" also means "/")
    amqp://u:p@h:5672/?management=http://h:15672&prometheus=http://h:15692
    stomp://user:pass@127.0.0.1:61613              ActiveMQ
    http://127.0.0.1:15672                         RabbitMQ management API of the RabbitMQ URL
                                                   before it (or the only one)

Missing ports default to 5672 (AMQP) and 61613 (STOMP). Each endpoint is named
``external-<kind><i>``. Lifecycle faults (kill/pause) are refused with a clear error; network
faults go through the fault proxy. Messages show URLs with the password masked
(`testbed.core.redact`).
"""

from __future__ import annotations

__all__ = [
    "ExternalBackend",
    "broker_version",
    "endpoint_url",
    "parse_broker_urls",
    "urls_from_env",
]

import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import cast
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from testbed.backends.base import Backend, BrokerEndpoint, BrokerKind
from testbed.core.broker_kinds import KINDS
from testbed.core.redact import redact_url
from testbed.exceptions import BackendError, ConfigurationError, NotOwnedError

_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671, "stomp": 61613, "stomp+ssl": 61614}
ENV_URLS = "MQBED_BROKER_URLS"
"""Whitespace- or comma-separated broker URLs (e.g. set by compose for the mqbed service)."""


def urls_from_env(environ: dict[str, str] | None = None) -> list[str]:
    """Broker URLs from ``$MQBED_BROKER_URLS`` ([] when unset)."""
    raw = (environ if environ is not None else os.environ).get(ENV_URLS, "")
    return [u for u in re.split(r"[\s,]+", raw) if u]


def parse_broker_urls(urls: Iterable[str], *, source: str = "broker.urls") -> list[BrokerEndpoint]:
    """`BrokerEndpoint`s for `urls`; `ConfigurationError` names `source`, index and URL."""
    endpoints: list[BrokerEndpoint] = []
    counts: dict[str, int] = {}
    for i, url in enumerate(urls):
        where = f"{source}[{i}]"
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in ("http", "https"):
            rabbits = [j for j, e in enumerate(endpoints) if e.kind == "rabbitmq"]
            if not rabbits:
                raise ConfigurationError(
                    f"{where}: management URL {redact_url(url)!r} must follow an amqp:// URL"
                )
            j = rabbits[-1]
            endpoints[j] = replace(endpoints[j], management_url=url.rstrip("/"))
            continue
        if scheme not in _DEFAULT_PORTS:
            raise ConfigurationError(
                f"{where}: unsupported URL scheme {scheme!r} in {redact_url(url)!r}; use amqp://, "
                "stomp:// or (for RabbitMQ's management API) http://"
            )
        # the registered kind whose URL scheme this is (amqps is amqp's, stomp+ssl stomp's)
        kind = cast(
            BrokerKind, next(k.name for k in KINDS.values() if scheme.startswith(k.url_scheme))
        )
        if not parts.hostname:
            raise ConfigurationError(f"{where}: no host in {redact_url(url)!r}")
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise ConfigurationError(f"{where}: bad port in {redact_url(url)!r}: {exc}") from exc
        if not parts.username or parts.password is None:
            raise ConfigurationError(
                f"{where}: {redact_url(url)!r} has no user:password (brokers with generated "
                "credentials only; guest/guest is not assumed)"
            )
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
        index = counts.get(kind, 0)
        counts[kind] = index + 1
        endpoints.append(
            BrokerEndpoint(
                kind=kind,
                name=f"external-{kind}{index}",
                host=parts.hostname,
                port=port,
                username=unquote(parts.username),
                password=unquote(parts.password),
                vhost=vhost,
                management_url=query.get("management", "").rstrip("/") or None,
                prometheus_url=query.get("prometheus", "").rstrip("/") or None,
            )
        )
    return endpoints


def endpoint_url(ep: BrokerEndpoint) -> str:
    """The URL `parse_broker_urls` reads back as `ep` (``amqp://`` with its management and
    Prometheus URLs, or ``stomp://``); user and password percent-encoded."""
    auth = f"{quote(ep.username, safe='')}:{quote(ep.password, safe='')}"
    if ep.kind == "activemq":
        return f"stomp://{auth}@{ep.host}:{ep.port}"
    extra = {k: v for k, v in (("management", ep.management_url),
                               ("prometheus", ep.prometheus_url)) if v}  # fmt: skip
    query = f"?{urlencode(extra)}" if extra else ""
    return f"amqp://{auth}@{ep.host}:{ep.port}/{query}"


def broker_version(ep: BrokerEndpoint, timeout: float = 2.0) -> str | None:
    """The broker's version as it reports it, or None (never raises)."""
    import requests

    from testbed.backends.local_activemq import stomp_connect
    from testbed.backends.node_driver import NotHealthy

    try:
        if ep.kind == "rabbitmq" and ep.management_url:
            resp = requests.get(
                f"{ep.management_url}/api/overview",
                auth=(ep.username, ep.password),
                timeout=timeout,
            )
            version = resp.json().get("rabbitmq_version") if resp.ok else None
            return str(version) if version else None
        if ep.kind == "activemq" and ep.host in ("127.0.0.1", "localhost"):
            server = stomp_connect(ep.port, ep.username, ep.password, timeout).get("server", "")
            return server.split("/", 1)[1] if "/" in server else None
    except (requests.RequestException, ValueError, NotHealthy):
        return None
    return None


class ExternalBackend(Backend):
    """Endpoints from URLs; the brokers' lifecycle belongs to someone else (the `Backend`
    methods that would change it raise `NotOwnedError`)."""

    def __init__(self, urls: Sequence[str], *, source: str = "broker.urls") -> None:
        self.home = None
        self._endpoints = parse_broker_urls(urls, source=source)
        if not self._endpoints:
            raise ConfigurationError(
                f"{source}: no broker URL given (set broker.urls in the scenario or ${ENV_URLS})"
            )

    def endpoints(self) -> list[BrokerEndpoint]:
        return list(self._endpoints)

    def endpoint(self, kind: str, *, with_version: bool = False) -> BrokerEndpoint:
        """The first endpoint of `kind`; `ConfigurationError` when there is none.

        `with_version`: ask the broker for its version (RabbitMQ's management API, ActiveMQ's
        STOMP CONNECTED frame; 2 s at most, None when it does not say).
        """
        for ep in self._endpoints:
            if ep.kind == kind:
                return replace(ep, version=broker_version(ep)) if with_version else ep
        have = sorted({e.kind for e in self._endpoints})
        raise ConfigurationError(f"no {kind} URL among the external brokers (have {have})")

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
        """The endpoints of `kinds` (nothing is started, nor warmed up: a broker someone else
        runs is taken as it is; the other arguments are ignored)."""
        return [self.endpoint(k) for k in dict.fromkeys(kinds)]

    def down(self, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        """Nothing to stop: external brokers are not ours."""
        return []

    def is_healthy(self, name: str, timeout: float = 2.0) -> bool:
        """Whether the broker's messaging port accepts TCP connections within `timeout` s."""
        import socket

        ep = self._named(name)
        try:
            with socket.create_connection((ep.host, ep.port), timeout=timeout):
                return True
        except OSError:
            return False

    def _named(self, name: str) -> BrokerEndpoint:
        for ep in self._endpoints:
            if ep.name == name:
                return ep
        raise BackendError(f"no external broker named {name!r}")

    def _no_lifecycle(self, name: str) -> NotOwnedError:
        self._named(name)
        return NotOwnedError(
            f"{name} is an external broker: mqbed does not own its lifecycle (no kill, pause or "
            "restart); use network faults through the fault proxy instead"
        )

    def kill_node(self, name: str) -> float | None:
        raise self._no_lifecycle(name)

    def pause_node(self, name: str) -> None:
        raise self._no_lifecycle(name)

    def resume_node(self, name: str) -> None:
        raise self._no_lifecycle(name)

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        raise self._no_lifecycle(name)

    def restart_node(self, name: str, timeout: float = 60.0) -> BrokerEndpoint:
        raise self._no_lifecycle(name)

    def rabbitmqctl(
        self, name: str, *args: str, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        raise NotOwnedError(
            f"{self._named(name).name} is an external broker: mqbed cannot run rabbitmqctl on it"
        )
