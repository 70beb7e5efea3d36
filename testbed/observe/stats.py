"""Broker statistics pollers: one shape (`BrokerStats`) from two sources.

- RabbitMQ: the management HTTP API. ``/api/queues/<vhost>`` gives ready/unacked/consumers and
  the broker's own rates (``message_stats.{publish,deliver_get,ack}_details.rate``, refreshed
  every ``collect_statistics_interval``); ``/api/nodes`` gives ``mem_used`` (the node's memory).
- ActiveMQ: the statistics broker plugin over STOMP. One poll sends a wildcard query
  (``ActiveMQ.Statistics.Destination.>``, one reply per queue) and then an
  ``ActiveMQ.Statistics.Broker`` query, whose reply closes the poll (replies arrive in order).
  Replies come back as JSON (``transformation: jms-map-json``) on a temporary queue. Rates are
  counter deltas between polls (enqueueCount -> publish, dispatchCount -> deliver,
  dequeueCount -> ack); unacked = inflightCount, ready = size - inflightCount. Memory is the
  broker's message memory (``memoryUsage``, what its memory limit blocks producers on), not the
  JVM's. Virtual Topic subscriber queues are reported under their logical names.

A poller that cannot reach its source returns ``broker_up=False`` (RabbitMQ: unless the AMQP
port still accepts connections) with the reason in `error`; it never raises for that.
Times: `BrokerStats.t` is wall-clock seconds (``time.time()``) at the end of the poll.
"""

from __future__ import annotations

__all__ = [
    "ActiveMQStatsPoller",
    "BrokerStats",
    "QueueStats",
    "RabbitMQStatsPoller",
    "StatsPoller",
    "make_stats_poller",
]

import json
import queue as queue_mod
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

import requests

from testbed.backends.base import BrokerEndpoint
from testbed.brokers.activemq_topology import logical_queue_name
from testbed.brokers.base import ConnectionLost
from testbed.brokers.stomp_session import StompSession, Subscription
from testbed.core.broker_kinds import KINDS, load
from testbed.exceptions import ConfigurationError


@dataclass(frozen=True)
class QueueStats:
    """One queue at one instant. Rates are messages per second."""

    ready: int
    unacked: int
    consumers: int
    publish_rate: float = 0.0
    deliver_rate: float = 0.0
    ack_rate: float = 0.0


@dataclass(frozen=True)
class BrokerStats:
    """One poll of one broker."""

    t: float
    broker: str
    broker_up: bool
    memory_bytes: int | None = None
    queues: dict[str, QueueStats] = field(default_factory=dict)
    error: str | None = None


class StatsPoller(Protocol):
    def poll(self) -> BrokerStats: ...

    def close(self) -> None: ...


def _port_open(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _num(d: dict[str, Any], *path: str) -> float:
    cur: Any = d
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return 0.0
        cur = cur[p]
    return float(cur) if isinstance(cur, int | float) else 0.0


class RabbitMQStatsPoller:
    """Polls RabbitMQ's management API (``endpoint.management_url``)."""

    _COLUMNS = (
        "name,messages_ready,messages_unacknowledged,consumers,"
        "message_stats.publish_details.rate,message_stats.deliver_get_details.rate,"
        "message_stats.ack_details.rate"
    )

    def __init__(
        self, endpoint: BrokerEndpoint, *, queues: Iterable[str] | None = None, timeout: float = 2.0
    ) -> None:
        if not endpoint.management_url:
            raise ConfigurationError(
                f"RabbitMQ endpoint {endpoint.name!r}: management_url is "
                f"{endpoint.management_url!r}; the stats poller needs the management plugin"
            )
        self.endpoint = endpoint
        self.queues = set(queues) if queues is not None else None
        self.timeout = timeout
        self._base = endpoint.management_url.rstrip("/")
        self._http = requests.Session()
        self._http.auth = (endpoint.username, endpoint.password)

    def _get(self, path: str, **params: str) -> Any:
        r = self._http.get(f"{self._base}{path}", params=params, timeout=self.timeout)
        r.raise_for_status()
        return r.json()

    def poll(self) -> BrokerStats:
        ep = self.endpoint
        try:
            nodes = self._get("/api/nodes", columns="name,mem_used,running")
            rows = self._get(f"/api/queues/{quote(ep.vhost, safe='')}", columns=self._COLUMNS)
        except (requests.RequestException, ValueError) as e:
            up = _port_open(ep.host, ep.port, self.timeout)
            return BrokerStats(time.time(), ep.name, up, None, {}, f"management API: {e!r}")
        running = [n for n in nodes if n.get("running")]
        memory = sum(int(n.get("mem_used") or 0) for n in running)
        out: dict[str, QueueStats] = {}
        for q in rows:
            name = q.get("name", "")
            if self.queues is not None and name not in self.queues:
                continue
            out[name] = QueueStats(
                ready=int(q.get("messages_ready") or 0),
                unacked=int(q.get("messages_unacknowledged") or 0),
                consumers=int(q.get("consumers") or 0),
                publish_rate=_num(q, "message_stats", "publish_details", "rate"),
                deliver_rate=_num(q, "message_stats", "deliver_get_details", "rate"),
                ack_rate=_num(q, "message_stats", "ack_details", "rate"),
            )
        return BrokerStats(time.time(), ep.name, bool(running), memory or None, out)

    def close(self) -> None:
        self._http.close()


def parse_jms_map_json(body: str | bytes) -> dict[str, Any]:
    """ActiveMQ's ``jms-map-json`` MapMessage body as a plain dict.

    Entries look like ``{"string": "size", "long": 3}`` or ``{"string": ["name", "value"]}``;
    a one-entry map is an object instead of a list (XStream/Jettison).
    """
    data = json.loads(body)
    entries = data.get("map", {}).get("entry", [])
    if isinstance(entries, dict):
        entries = [entries]
    out: dict[str, Any] = {}
    for e in entries:
        key = e.get("string")
        if isinstance(key, list) and len(key) == 2:
            out[str(key[0])] = key[1]
        elif isinstance(key, str):
            values = [v for k, v in e.items() if k != "string"]
            out[key] = values[0] if values else None
    return out


class ActiveMQStatsPoller:
    """Polls ActiveMQ's statistics plugin over its own STOMP connection."""

    REPLY_TO = "/temp-queue/mqbed-stats"

    def __init__(
        self, endpoint: BrokerEndpoint, *, queues: Iterable[str] | None = None, timeout: float = 2.0
    ) -> None:
        self.endpoint = endpoint
        self.queues = set(queues) if queues is not None else None
        self.timeout = timeout
        self._session: StompSession | None = None
        self._sub: Subscription | None = None
        self._polls = 0
        self._prev: dict[str, tuple[float, float, float, float]] = {}

    def _ensure_session(self) -> tuple[StompSession, Subscription]:
        if self._session is not None and self._session.alive and self._sub is not None:
            return self._session, self._sub
        self.close()
        ep = self.endpoint
        s = StompSession(ep.host, ep.port, ep.username, ep.password, connect_timeout=self.timeout)
        s.connect()
        try:
            sub = s.subscribe(
                self.REPLY_TO, ack="auto", headers={"transformation": "jms-map-json"},
                timeout=self.timeout,
            )  # fmt: skip
        except ConnectionLost:
            s.close()
            raise
        self._session, self._sub = s, sub
        return s, sub

    def _query(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        s, sub = self._ensure_session()
        self._polls += 1
        corr = f"mqbed-stats-{self._polls}"
        reply = {"reply-to": self.REPLY_TO}
        s.send("/queue/ActiveMQ.Statistics.Destination.>", b"", {**reply, "correlation-id": corr})
        s.send("/queue/ActiveMQ.Statistics.Broker", b"", {**reply, "correlation-id": corr + "-b"})
        deadline = time.monotonic() + self.timeout
        dests: list[dict[str, Any]] = []
        while True:
            left = deadline - time.monotonic()
            try:
                frame = sub.frames.get(timeout=max(left, 0.001))
            except queue_mod.Empty:
                raise ConnectionLost(
                    f"statistics plugin on {s.where}: no broker reply within {self.timeout} s "
                    f"(is <statisticsBrokerPlugin/> configured?)"
                ) from None
            if frame is None:
                raise ConnectionLost(f"statistics connection to {s.where} lost")
            cid = frame.headers.get("correlation-id")
            if cid == corr:
                dests.append(parse_jms_map_json(frame.body))
            elif cid == corr + "-b":
                return dests, parse_jms_map_json(frame.body)

    def poll(self) -> BrokerStats:
        ep = self.endpoint
        try:
            dests, broker = self._query()
        except ConnectionLost as e:
            self.close()
            return BrokerStats(time.time(), ep.name, False, None, {}, str(e))
        now = time.monotonic()
        out: dict[str, QueueStats] = {}
        for d in dests:
            physical = str(d.get("destinationName", "")).removeprefix("queue://")
            name = logical_queue_name(physical)
            if self.queues is not None and name not in self.queues:
                continue
            size, inflight = int(d.get("size") or 0), int(d.get("inflightCount") or 0)
            counters = (
                now,
                float(d.get("enqueueCount") or 0),
                float(d.get("dispatchCount") or 0),
                float(d.get("dequeueCount") or 0),
            )
            rates = [0.0, 0.0, 0.0]
            prev = self._prev.get(physical)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                rates = [
                    max(0.0, (c - p) / dt) for c, p in zip(counters[1:], prev[1:], strict=True)
                ]
            self._prev[physical] = counters
            out[name] = QueueStats(
                ready=max(0, size - inflight),
                unacked=inflight,
                consumers=int(d.get("consumerCount") or 0),
                publish_rate=rates[0],
                deliver_rate=rates[1],
                ack_rate=rates[2],
            )
        memory = broker.get("memoryUsage")
        return BrokerStats(
            time.time(), ep.name, True, int(memory) if memory is not None else None, out
        )

    def close(self) -> None:
        s, self._session, self._sub = self._session, None, None
        if s is not None:
            s.close()


def make_stats_poller(
    endpoint: BrokerEndpoint, *, queues: Iterable[str] | None = None, timeout: float = 2.0
) -> StatsPoller:
    """The poller for `endpoint.kind` (`KindFacts.stats_poller`)."""
    facts = KINDS.get(endpoint.kind)
    if facts is None:
        raise ConfigurationError(f"stats poller: unknown broker kind {endpoint.kind!r}")
    poller: StatsPoller = load(facts.stats_poller)(endpoint, queues=queues, timeout=timeout)
    return poller
