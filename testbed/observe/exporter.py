"""Prometheus exporter: a Recorder listener serving mqbed's live metrics on 127.0.0.1.

One `PrometheusExporter` per process, with its own ``CollectorRegistry`` and HTTP server on
``127.0.0.1:<port>`` (port 0 = a free one; every Locust worker gets its own). The exporter
announces itself to Prometheus through **file-based service discovery**: `start` writes
``<sd_dir>/<name>.json`` (``[{"targets": ["127.0.0.1:PORT"], "labels": {...}}]``) and `close`
removes it; a Prometheus with ``file_sd_configs: [{files: ["<sd_dir>/*.json"]}]`` (see
`testbed.observe.prometheus`) picks targets up within a second.

Metrics (all prefixed ``mqbed_``; the target labels ``run_id`` and ``process`` come from the
SD file, not from every series):

=====================================  =========  ==========================================
``published_total{flow,queue}``        counter    every publish attempt
``publish_confirmed_total{flow,queue}`` counter   publishes the broker confirmed
``publish_failed_total{flow,queue}``   counter    publishes not confirmed (nack, return, error)
``deliveries_total{queue,outcome}``    counter    delivery attempts by outcome
``acks_total{queue}``                  counter    deliveries acked
``confirm_latency_seconds{flow}``      histogram  publish → confirm
``end_to_end_latency_seconds{queue}``  histogram  publish → consumer done (per delivery)
``queue_depth{queue,state}``           gauge      ready / unacked (from the broker poller)
``queue_consumers{queue}``             gauge      consumers the broker reports
``queue_rate{queue,kind}``             gauge      broker-side publish/deliver/ack msg/s
``broker_up`` / ``broker_memory_bytes`` gauge     from the broker poller
``fault_active{target,fault}``         gauge      1 between ``fault_start`` and ``fault_end``
``scale_target{target}``               gauge      last ``scale`` event's target count
``events_total{kind}``                 counter    every recorded event
=====================================  =========  ==========================================

Histogram buckets run from 100 µs to 10 s (`LATENCY_BUCKETS`). Queue gauges are fed by
`observe_stats` — wrap the run's stats poller with `ExportingPoller` and every poll updates
them. Event details read: ``fault_start``/``fault_end`` → ``detail["fault"]`` (or
``detail["kind"]``), ``scale`` → ``detail["to"]`` (or ``"count"``, ``"desired"``).
"""

from __future__ import annotations

__all__ = [
    "ENV_SD_DIR",
    "ExportingPoller",
    "LATENCY_BUCKETS",
    "PrometheusExporter",
    "exporter_from_env",
    "write_sd_file",
]

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from testbed.observe.stats import BrokerStats, StatsPoller

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Seconds: 100 µs … 10 s, 1-2.5-5 steps."""
ENV_SD_DIR = "MQBED_PROMETHEUS_SD_DIR"
"""When set, `exporter_from_env` starts an exporter and announces it in this directory."""
ENV_RUN_ID = "MQBED_RUN_ID"
ENV_HOST = "MQBED_EXPORTER_HOST"
"""Bind address (default 127.0.0.1). In a bridge-networked container: 0.0.0.0."""
ENV_ADVERTISE = "MQBED_EXPORTER_ADVERTISE"
"""Host name written into the SD file (default: the bind address, or the container's host
name when binding 0.0.0.0)."""


def write_sd_file(path: Path, target: str, labels: dict[str, str]) -> None:
    """Atomically write one Prometheus file_sd target group to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps([{"targets": [target], "labels": labels}]) + "\n")
    os.replace(tmp, path)


class PrometheusExporter:
    """Recorder listener + HTTP endpoint for one process. Thread-safe (prometheus-client)."""

    def __init__(
        self,
        name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        sd_dir: Path | str | None = None,
        labels: dict[str, str] | None = None,
        advertise: str | None = None,
    ) -> None:
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        self.host = host
        self.port = port
        self.advertise = advertise
        self.sd_dir = Path(sd_dir) if sd_dir else None
        self.labels = {"process": self.name, **(labels or {})}
        self.registry = CollectorRegistry(auto_describe=True)
        self._server: Any = None
        self._thread: Any = None
        r = self.registry
        self.published = Counter(
            "mqbed_published", "Publish attempts.", ["flow", "queue"], registry=r
        )
        self.confirmed = Counter(
            "mqbed_publish_confirmed", "Publishes confirmed.", ["flow", "queue"], registry=r
        )
        self.failed = Counter(
            "mqbed_publish_failed", "Publishes not confirmed.", ["flow", "queue"], registry=r
        )
        self.deliveries = Counter(
            "mqbed_deliveries", "Delivery attempts by outcome.", ["queue", "outcome"], registry=r
        )
        self.acks = Counter("mqbed_acks", "Deliveries acked.", ["queue"], registry=r)
        self.confirm_latency = Histogram(
            "mqbed_confirm_latency_seconds",
            "Publish to broker confirm.",
            ["flow"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e_latency = Histogram(
            "mqbed_end_to_end_latency_seconds",
            "Publish to consumer done, per delivery.",
            ["queue"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.depth = Gauge(
            "mqbed_queue_depth", "Messages in the queue.", ["queue", "state"], registry=r
        )
        self.consumers = Gauge(
            "mqbed_queue_consumers", "Consumers the broker reports.", ["queue"], registry=r
        )
        self.rates = Gauge(
            "mqbed_queue_rate", "Broker-side rates, msg/s.", ["queue", "kind"], registry=r
        )
        self.broker_up = Gauge("mqbed_broker_up", "1 while the broker answers.", registry=r)
        self.broker_memory = Gauge(
            "mqbed_broker_memory_bytes", "Broker memory the poller reports.", registry=r
        )
        self.fault_active = Gauge(
            "mqbed_fault_active", "1 while a fault is injected.", ["target", "fault"], registry=r
        )
        self.scale_target = Gauge(
            "mqbed_scale_target", "Target count of the last scale event.", ["target"], registry=r
        )
        self.events = Counter("mqbed_events", "Recorded events.", ["kind"], registry=r)

    # ----------------------------------------------------------------- serving

    def start(self) -> int:
        """Serve ``/metrics`` on host:port (a free port when 0); announce; return the port."""
        if self._server is None:
            self._server, self._thread = start_http_server(
                self.port, addr=self.host, registry=self.registry
            )
            self.port = int(self._server.server_port)
        if self.sd_dir is not None:
            write_sd_file(self.sd_path, self.target, self.labels)
        return self.port

    @property
    def target(self) -> str:
        """``host:port`` as Prometheus should scrape it."""
        host = self.advertise or self.host
        if host in ("0.0.0.0", "::", ""):
            import socket

            host = socket.gethostname()
        return f"{host}:{self.port}"

    @property
    def sd_path(self) -> Path:
        if self.sd_dir is None:
            raise ValueError("exporter has no sd_dir")
        return self.sd_dir / f"{self.name}.json"

    @property
    def url(self) -> str:
        return f"http://{self.target}/metrics"

    def close(self) -> None:
        """Withdraw the SD file and stop serving (idempotent)."""
        if self.sd_dir is not None:
            self.sd_path.unlink(missing_ok=True)
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> PrometheusExporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- listener API

    def on_message(
        self,
        flow: str,
        queue: str,
        size: int,
        t_publish: float,
        t_confirm: float | None,
        ok: bool,
    ) -> None:
        self.published.labels(flow, queue).inc()
        if ok:
            self.confirmed.labels(flow, queue).inc()
            if t_confirm is not None:
                self.confirm_latency.labels(flow).observe(max(0.0, t_confirm - t_publish))
        else:
            self.failed.labels(flow, queue).inc()

    def on_delivery(
        self, queue: str, consumer: str, outcome: str, latency_s: float | None, size: int
    ) -> None:
        self.deliveries.labels(queue, outcome).inc()
        if outcome == "acked":
            self.acks.labels(queue).inc()
        if latency_s is not None:
            self.e2e_latency.labels(queue).observe(max(0.0, latency_s))

    def on_event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None:
        self.events.labels(kind).inc()
        if kind in ("fault_start", "fault_end"):
            fault = str(detail.get("fault") or detail.get("kind") or "fault")
            self.fault_active.labels(target, fault).set(1 if kind == "fault_start" else 0)
        elif kind == "scale":
            for key in ("to", "count", "desired"):
                value = detail.get(key)
                if isinstance(value, int | float):
                    self.scale_target.labels(target).set(value)
                    break

    # ----------------------------------------------------------------- broker stats

    def observe_stats(self, stats: BrokerStats) -> None:
        """Update the queue and broker gauges from one poll."""
        self.broker_up.set(1 if stats.broker_up else 0)
        if stats.memory_bytes is not None:
            self.broker_memory.set(stats.memory_bytes)
        for queue, q in stats.queues.items():
            self.depth.labels(queue, "ready").set(q.ready)
            self.depth.labels(queue, "unacked").set(q.unacked)
            self.consumers.labels(queue).set(q.consumers)
            self.rates.labels(queue, "publish").set(q.publish_rate)
            self.rates.labels(queue, "deliver").set(q.deliver_rate)
            self.rates.labels(queue, "ack").set(q.ack_rate)


class ExportingPoller:
    """A `StatsPoller` that hands every poll to an exporter before returning it."""

    def __init__(self, inner: StatsPoller, exporter: PrometheusExporter) -> None:
        self.inner = inner
        self.exporter = exporter

    def poll(self) -> BrokerStats:
        stats = self.inner.poll()
        try:
            self.exporter.observe_stats(stats)
        except Exception:  # metrics must never break the measurement
            log.warning("exporter could not take a broker poll", exc_info=True)
        return stats

    def close(self) -> None:
        self.inner.close()


def exporter_from_env(
    name: str, *, run_id: str | None = None, environ: dict[str, str] | None = None
) -> PrometheusExporter | None:
    """A started exporter when ``$MQBED_PROMETHEUS_SD_DIR`` is set, else None.

    `name` identifies the process (e.g. ``w1-12345``, ``control-r0``); `run_id` (default
    ``$MQBED_RUN_ID``) becomes the ``run_id`` target label; ``$MQBED_EXPORTER_HOST`` /
    ``$MQBED_EXPORTER_ADVERTISE`` set bind and announced addresses.
    """
    env = environ if environ is not None else os.environ
    sd_dir = env.get(ENV_SD_DIR)
    if not sd_dir:
        return None
    run_id = run_id or env.get(ENV_RUN_ID)
    exporter = PrometheusExporter(
        name,
        host=env.get(ENV_HOST, "127.0.0.1"),
        sd_dir=sd_dir,
        labels={"run_id": run_id} if run_id else {},
        advertise=env.get(ENV_ADVERTISE) or None,
    )
    exporter.start()
    return exporter
