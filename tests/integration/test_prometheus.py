"""Prometheus (Debian's, as a plain process) scraping mqbed's exporters and RabbitMQ's plugin.

- The exporter is discovered through file SD, its series carry the values fed to it, and every
  query of the Grafana dashboard (deploy/grafana/dashboards/mqbed.json) is valid PromQL.
- A short live run with the exporters on (``MQBED_PROMETHEUS_SD_DIR``) leaves mqbed series with
  non-zero values in Prometheus: publishes, deliveries, latency histograms, queue consumers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.observe.exporter import ENV_SD_DIR, PrometheusExporter
from testbed.observe.prometheus import PrometheusServer, query, wait_for_series

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "mqbed.json"


@pytest.fixture
def prometheus(tmp_path: Path, rabbitmq: BrokerEndpoint) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path / "home", scrape_interval=0.5)
    try:
        server.start([rabbitmq], owned=True)
    except Exception as exc:
        pytest.fail(f"could not start prometheus: {exc}", pytrace=False)
    yield server
    assert server.stop(), "prometheus was not running at teardown"
    assert not server.running()


def _value(result: list[dict[str, Any]]) -> float:
    return sum(float(r["value"][1]) for r in result)


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t]
    # Grafana's own variables, as Grafana would substitute them
    return [re.sub(r"\$__rate_interval|\$__interval", "1m", e) for e in exprs]


def test_exporter_is_discovered_and_scraped(
    prometheus: PrometheusServer, rabbitmq: BrokerEndpoint
) -> None:
    with PrometheusExporter("unit", sd_dir=prometheus.sd_dir, labels={"run_id": "t"}) as exp:
        sd = json.loads(exp.sd_path.read_text())
        assert sd == [{"targets": [exp.target], "labels": {"process": "unit", "run_id": "t"}}]
        assert exp.target.startswith("127.0.0.1:")
        for i in range(10):
            exp.on_message("orders", "work", 100, 0.0, 0.002 * (i + 1), True)
        exp.on_message("orders", "work", 100, 0.0, None, False)
        exp.on_delivery("work", "c0", "acked", 0.0004, 100)
        exp.on_delivery("work", "c0", "nacked", 2.0, 100)
        exp.on_event(1.0, "fault_start", "rabbitmq0", {"fault": "pause"})
        exp.on_event(1.0, "scale", "workers", {"to": 4})
        url = prometheus.url
        published = wait_for_series(url, 'mqbed_published_total{process="unit"}', timeout=20)
        assert _value(published) == 11
        assert _value(query(url, "mqbed_publish_failed_total")) == 1
        assert _value(query(url, 'mqbed_deliveries_total{outcome="acked"}')) == 1
        assert _value(query(url, "mqbed_fault_active")) == 1
        assert _value(query(url, "mqbed_scale_target")) == 4
        buckets = query(url, 'mqbed_end_to_end_latency_seconds_bucket{le="0.0005"}')
        assert _value(buckets) == 1  # 0.4 ms falls in the 100 µs…10 s ladder
        assert query(url, 'mqbed_end_to_end_latency_seconds_bucket{le="10.0"}')
    assert not exp.sd_path.exists()
    rabbit = wait_for_series(
        prometheus.url, 'up{job="rabbitmq"} == 1', timeout=20, accept=lambda r: len(r) == 1
    )
    assert rabbit, "RabbitMQ's prometheus plugin was not scraped"
    queries = _dashboard_queries()
    assert len(queries) >= 8
    for expr in queries:
        query(prometheus.url, expr)  # raises on invalid PromQL


def test_short_run_exports_non_zero_mqbed_series(
    prometheus: PrometheusServer,
    local_backend: LocalBackend,
    rabbitmq: BrokerEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from testbed.run import run_scenario

    scenario = yaml.safe_load((REPO / "workloads" / "scenarios" / "quickstart.yaml").read_text())
    scenario.update(name="quickstart-prometheus", duration="6s", warmup="1s", drain_timeout="20s")
    path = tmp_path / "quickstart-prometheus.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    monkeypatch.setenv(ENV_SD_DIR, str(prometheus.sd_dir))
    result = run_scenario(path, home=local_backend.home, out_dir=tmp_path / "runs", predict=False)
    (ledger,) = result.ledgers
    # a clean run: every message confirmed, then acked exactly once
    assert ledger.sent > 0 and ledger.lost == ledger.duplicated == ledger.redeliveries == 0
    url = prometheus.url
    window = "[10m]"
    published = _value(query(url, f"sum(max_over_time(mqbed_published_total{window}))"))
    confirmed = _value(query(url, f"sum(max_over_time(mqbed_publish_confirmed_total{window}))"))
    failed = _value(query(url, f"sum(max_over_time(mqbed_publish_failed_total{window}))"))
    acked = _value(query(url, f"sum(max_over_time(mqbed_acks_total{window}))"))
    latency = _value(
        query(url, f"sum(max_over_time(mqbed_end_to_end_latency_seconds_count{window}))")
    )
    consumers = _value(query(url, f"max(max_over_time(mqbed_queue_consumers{window}))"))
    # exact: the counters stop with the last publish and ack, the exporters close only after
    # the drain saw an empty queue on two polls 1 s apart, and Prometheus scrapes every 0.5 s
    assert (published, confirmed, failed) == (
        ledger.sent,
        ledger.confirmed,
        ledger.sent - ledger.confirmed,
    )
    assert acked == latency == ledger.delivered_unique, (acked, latency, ledger)
    assert consumers == sum(c["count"] for c in scenario["consumers"])
    assert not list(prometheus.sd_dir.glob("*.json")), "exporters did not withdraw their targets"
