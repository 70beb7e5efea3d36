"""Pure parts of the container and observability work: no engine, no broker.

External broker URLs, apt sources → mmdebstrap mirrors, image content hashes, the compose
``.env``, the exporter's metrics, the Prometheus config, the Grafana dashboard.
"""

from __future__ import annotations

import json
import re
import stat
import urllib.request
from pathlib import Path

import pytest

from testbed.backends import image_catalogue, images
from testbed.backends.apt_sources import apt_mirrors
from testbed.backends.compose import ENV_PORT_KEYS, read_env_file, write_compose_env
from testbed.backends.external import ExternalBackend, parse_broker_urls, urls_from_env
from testbed.exceptions import BackendError, ConfigurationError
from testbed.observe.exporter import LATENCY_BUCKETS, ExportingPoller, PrometheusExporter
from testbed.observe.prometheus import PrometheusServer
from testbed.observe.stats import BrokerStats, QueueStats

REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------- external backend


def test_external_urls_become_endpoints() -> None:
    eps = parse_broker_urls(
        [
            "amqp://u%40x:p%2Fw@127.0.0.1:5673/%2F",
            "http://127.0.0.1:15673/",
            "amqp://a:b@127.0.0.1/orders?prometheus=http://127.0.0.1:15692",
            "stomp://s:t@127.0.0.1",
        ]
    )
    r0, r1, a0 = eps
    assert (r0.kind, r0.name, r0.port, r0.username, r0.password, r0.vhost) == (
        "rabbitmq", "external-rabbitmq0", 5673, "u@x", "p/w", "/",
    )  # fmt: skip
    assert r0.management_url == "http://127.0.0.1:15673"
    assert (r1.port, r1.vhost, r1.prometheus_url) == (5672, "orders", "http://127.0.0.1:15692")
    assert (a0.kind, a0.port, a0.name) == ("activemq", 61613, "external-activemq0")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mqtt://u:p@127.0.0.1", "unsupported URL scheme 'mqtt'"),
        ("amqp://127.0.0.1:5672/", "no user:password"),
        ("http://127.0.0.1:15672", "must follow an amqp:// URL"),
        ("amqp://u:p@127.0.0.1:notaport/", "bad port"),
    ],
)
def test_external_url_errors_name_the_entry(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as err:
        parse_broker_urls([url], source="broker.urls")
    assert "broker.urls[0]" in str(err.value)
    assert ":p@" not in str(err.value)  # passwords are not echoed


def test_external_backend_has_no_lifecycle() -> None:
    ext = ExternalBackend(["amqp://u:p@127.0.0.1:1/"])
    (ep,) = ext.up(["rabbitmq"])
    assert ext.down() == []
    with pytest.raises(BackendError, match="does not own its lifecycle"):
        ext.kill_node(ep.name)
    with pytest.raises(ConfigurationError, match="no activemq URL"):
        ext.endpoint("activemq")
    assert urls_from_env({"MQBED_BROKER_URLS": "amqp://a:b@h/ ,\n stomp://c:d@h"}) == [
        "amqp://a:b@h/",
        "stomp://c:d@h",
    ]


# ----------------------------------------------------------------- images


def test_apt_sources_become_mirror_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQBED_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# none\ndeb [arch=amd64] http://m/debian bookworm main contrib\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /k.gpg\n\n"
        "Types: deb-src\nURIs: http://src\nSuites: bookworm\nComponents: main\n\n"
        "Types: deb\nURIs: http://off\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb\nURIs: http://other\nSuites: trixie\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "cloud.list.disabled-by-farm").write_text(
        "deb http://x bookworm main\n"
    )
    assert apt_mirrors("bookworm", tmp_path) == [
        "deb http://m/debian bookworm main contrib",
        "deb http://deb.example/debian bookworm main",
        "deb http://deb.example/debian bookworm-updates main",
    ]
    monkeypatch.setenv("MQBED_DEBIAN_MIRROR", "http://mirror")
    assert apt_mirrors("bookworm", tmp_path) == ["deb http://mirror bookworm main"]


def test_image_tags_are_content_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    refs = {n: images.image_ref(n, "bookworm") for n in images.IMAGE_NAMES}
    assert refs == {n: images.image_ref(n, "bookworm") for n in images.IMAGE_NAMES}  # stable
    assert all(re.fullmatch(rf"mqbed/{n}:[0-9a-f]{{12}}", r) for n, r in refs.items())
    assert len(set(refs.values())) == len(refs)
    assert images.image_ref("rabbitmq", "trixie") != refs["rabbitmq"]
    spec = images.image_specs()["rabbitmq"]
    monkeypatch.setattr(images.ImageSpec, "packages", lambda self: ["rabbitmq-server", "curl"])
    assert images.content_hash(spec, "bookworm") not in refs["rabbitmq"]
    with pytest.raises(ConfigurationError, match="not one of"):
        images.image_ref("grafana")


def test_image_tags_do_not_depend_on_the_checkout_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref = images.image_ref("mqbed", "bookworm")
    for name in ("pyproject.toml", "constraints.txt"):
        (tmp_path / name).write_text((REPO / name).read_text())
    monkeypatch.setattr(images, "REPO", tmp_path)  # e.g. CI's fresh clone elsewhere
    monkeypatch.setattr(image_catalogue, "REPO", tmp_path)
    assert images.image_ref("mqbed", "bookworm") == ref


def test_package_lists_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image_catalogue, "IMAGES_DIR", tmp_path)
    (tmp_path / "x.packages").write_text("# c\nrabbitmq-server\nBad Name\n")
    with pytest.raises(ConfigurationError, match=r"x.packages:3: 'Bad Name'"):
        images.ImageSpec("x").packages()


# ----------------------------------------------------------------- compose .env


def test_compose_env_is_complete_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "compose" / ".env"
    first = write_compose_env(path, runs_dir=tmp_path / "runs")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_env_file(path) == first
    ports = [int(first[k]) for k in ENV_PORT_KEYS]
    assert len(set(ports)) == len(ports) and all(1024 < p < 65536 for p in ports)
    assert first["MQBED_USER"].startswith("mqbed-") and first["MQBED_USER"] != "guest"
    assert first["MQBED_PASSWORD"].isalnum() and len(first["MQBED_PASSWORD"]) >= 20
    assert (tmp_path / "runs" / ".prometheus").is_dir()
    assert write_compose_env(path) == first  # existing values are kept (volumes match them)


def test_compose_files_use_only_env_credentials() -> None:
    for name in ("docker-compose.yml", "docker-compose.override.yml", "docker-compose.offline.yml"):
        lines = (REPO / "compose" / name).read_text().splitlines()
        text = "\n".join(ln for ln in lines if not ln.lstrip().startswith("#"))
        assert "guest" not in text
        assert not re.search(r"[\"' ]\d{2,5}:\d{2,5}[\"']", text.replace("127.0.0.1:", "")), (
            f"{name}: a port published without 127.0.0.1"
        )
        for var in re.findall(r"\$\{(MQBED_[A-Z0-9_]+PORT)", text):
            assert var in ENV_PORT_KEYS, f"{name}: {var} is not generated by write_compose_env"


# ----------------------------------------------------------------- exporter


def _scrape(exporter: PrometheusExporter) -> str:
    with urllib.request.urlopen(exporter.url, timeout=5) as resp:  # noqa: S310
        return resp.read().decode()


def test_exporter_serves_the_listener_metrics(tmp_path: Path) -> None:
    assert LATENCY_BUCKETS[0] == 0.0001 and LATENCY_BUCKETS[-1] == 10.0
    with PrometheusExporter("w1-7", sd_dir=tmp_path, labels={"run_id": "r"}) as exp:
        assert exp.sd_path.exists() and exp.port > 0
        exp.on_message("f", "q", 10, 1.0, 1.003, True)
        exp.on_message("f", "q", 10, 1.0, None, False)
        exp.on_delivery("q", "c", "acked", 0.02, 10)
        exp.on_delivery("q", "c", "timed_out", None, 10)
        exp.on_event(2.0, "fault_start", "rabbitmq0", {"kind": "pause"})
        exp.on_event(3.0, "fault_end", "rabbitmq0", {"kind": "pause"})
        exp.on_event(3.0, "scale", "workers", {"count": 3})
        poller = ExportingPoller(_FixedPoller(), exp)
        poller.poll()
        text = _scrape(exp)
    assert not (tmp_path / "w1-7.json").exists()
    for line in (
        'mqbed_published_total{flow="f",queue="q"} 2.0',
        'mqbed_publish_confirmed_total{flow="f",queue="q"} 1.0',
        'mqbed_publish_failed_total{flow="f",queue="q"} 1.0',
        'mqbed_deliveries_total{outcome="timed_out",queue="q"} 1.0',
        'mqbed_acks_total{queue="q"} 1.0',
        'mqbed_end_to_end_latency_seconds_bucket{le="0.025",queue="q"} 1.0',
        'mqbed_confirm_latency_seconds_bucket{flow="f",le="0.005"} 1.0',
        'mqbed_fault_active{fault="pause",target="rabbitmq0"} 0.0',
        'mqbed_scale_target{target="workers"} 3.0',
        'mqbed_queue_depth{queue="q",state="ready"} 5.0',
        'mqbed_queue_consumers{queue="q"} 2.0',
        "mqbed_broker_up 1.0",
        'mqbed_events_total{kind="scale"} 1.0',
    ):
        assert line in text, line


class _FixedPoller:
    def poll(self) -> BrokerStats:
        return BrokerStats(0.0, "b", True, 10, {"q": QueueStats(5, 1, 2, 3.0, 2.0, 1.0)})

    def close(self) -> None:
        return None


def test_prometheus_config_lists_exporters_and_rabbitmq(tmp_path: Path) -> None:
    from testbed.backends.base import BrokerEndpoint

    ep = BrokerEndpoint("rabbitmq", "rabbitmq0", "127.0.0.1", 1, "u", "p",
                        prometheus_url="http://127.0.0.1:15999")  # fmt: skip
    server = PrometheusServer(tmp_path, scrape_interval=0.5)
    text = server.write_config([ep]).read_text()
    assert "scrape_interval: 500ms" in text
    assert str(server.sd_dir / "*.json") in text
    assert 'targets: ["127.0.0.1:15999"]' in text and "/metrics/per-object" in text
    assert not server.running() and server.stop() is False


def test_dashboard_covers_the_exported_metrics() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "dashboards" / "mqbed.json").read_text())
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in ("mqbed_published_total", "mqbed_deliveries_total", "mqbed_acks_total",
                   "mqbed_end_to_end_latency_seconds_bucket", "mqbed_queue_depth",
                   "mqbed_queue_consumers", "mqbed_fault_active", "mqbed_scale_target"):  # fmt: skip
        assert metric in exprs, metric
    assert {p["datasource"]["uid"] for p in dashboard["panels"]} == {"mqbed-prometheus"}
    datasource = REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
    assert "uid: mqbed-prometheus" in datasource.read_text()
