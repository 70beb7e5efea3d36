"""The offline images: cached by content, labelled, and working — Prometheus from its image
(run with testcontainers, host network) scrapes a RabbitMQ container's prometheus plugin."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from testcontainers.core.container import DockerContainer

from testbed.backends.base import BrokerEndpoint
from testbed.backends.images import IMAGE_NAMES, ensure_image, image_ref
from testbed.backends.ports import pick_free_ports, wait_port_open

pytestmark = pytest.mark.docker


def test_images_are_cached_by_content(offline_images: dict[str, str], docker_client: Any) -> None:
    for name in IMAGE_NAMES:
        ref = offline_images[name]
        assert ref == image_ref(name)
        t0 = time.monotonic()
        assert ensure_image(name, docker_client) == ref  # present: no build
        assert time.monotonic() - t0 < 20.0  # a build takes minutes
        image = docker_client.images.get(ref)
        labels = image.attrs["Config"]["Labels"]
        assert labels["org.mqbed.image"] == name
        assert ref.endswith(":" + labels["org.mqbed.hash"])
        assert f"mqbed/{name}:latest" in image.tags  # what the offline compose override uses


def test_prometheus_image_scrapes_rabbitmq_container(
    offline_images: dict[str, str], rabbitmq: BrokerEndpoint, tmp_path: Path
) -> None:
    (port,) = pick_free_ports(1)
    assert rabbitmq.prometheus_url
    target = urllib.parse.urlsplit(rabbitmq.prometheus_url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: rabbitmq\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    container = (
        DockerContainer(offline_images["prometheus"])
        .with_kwargs(network_mode="host")
        .with_volume_mapping(str(tmp_path), "/etc/mqbed-prometheus", "ro")
        .with_command(
            [
                "--config.file=/etc/mqbed-prometheus/prometheus.yml",
                "--storage.tsdb.path=/tmp/tsdb",
                f"--web.listen-address=127.0.0.1:{port}",
            ]
        )
    )
    with container:
        assert wait_port_open(port, 20.0), "prometheus container did not listen"
        query = urllib.parse.urlencode({"query": 'rabbitmq_build_info or up{job="rabbitmq"}'})
        deadline = time.monotonic() + 30
        result: list[Any] = []
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(  # noqa: S310
                    f"http://127.0.0.1:{port}/api/v1/query?{query}", timeout=5
                ) as resp:
                    result = json.loads(resp.read())["data"]["result"]
            except urllib.error.HTTPError as exc:  # 503 until the TSDB is ready
                assert exc.code == 503, exc
            if any(r["metric"].get("__name__") == "rabbitmq_build_info" for r in result):
                break
            time.sleep(0.5)
        names = {r["metric"].get("__name__") for r in result}
        assert "rabbitmq_build_info" in names, result
