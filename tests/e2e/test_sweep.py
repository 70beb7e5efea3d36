"""A real two-point sweep (live RabbitMQ runs + predictions + Spark + pages): the grid is
expanded and validated, every point runs, and sweep.json / sweep.html describe the curves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.core.profile import shipped_profile_path
from testbed.sweep import sweep

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIO = """\
name: e2e-sweep
seed: 5
duration: 3s
warmup: 1s
drain_timeout: 10s
broker: {kind: rabbitmq}
topology:
  queues: [{name: work}]
producers:
  - {name: orders, count: 1, queue: work, arrival: {kind: poisson, rate: 50/s}}
consumers:
  - {name: workers, queue: work, count: 1, prefetch: 10,
     service_time: {kind: exponential, mean: 1ms}}
"""


def test_two_point_sweep_writes_curves_and_capacity(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    scenario = tmp_path / "sweep.yaml"
    scenario.write_text(SCENARIO)
    root = sweep(
        scenario,
        ["producers[orders].arrival.rate=50/s:100/s:50/s"],
        home=local_backend.home,
        out_dir=tmp_path / "out",
        sla_p95=0.5,
        console=Console(stderr=True, quiet=True),
        # the sweep's machinery is tested here, not the accuracy: the shipped profile, so no
        # calibration (a minute, two on a busy machine) runs before the first point
        profile=shipped_profile_path("rabbitmq", "pika"),
    )
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["parameter"] == "producers[orders].arrival.rate"
    assert [p["x"] for p in doc["points"]] == [50.0, 100.0]
    low, high = (p["measured"]["throughput_msg_s"] for p in doc["points"])
    window = 2.0  # duration 3 s - warmup 1 s
    for rate, measured in ((50.0, low), (100.0, high)):
        n = rate * window  # Poisson count over the load window: within 4 sigma of it
        assert abs(measured * window - n) < 4 * math.sqrt(n), (rate, measured)
    assert all(p["predicted"]["throughput_msg_s"] for p in doc["points"])
    # far below capacity: not saturated, and both loads meet a 500 ms p95
    assert doc["saturation"] == {"measured": None, "predicted": None}
    assert doc["sla_capacity"]["measured"]["x"] == 100.0
    assert (root / "points" / "01.yaml").read_text().startswith("name: e2e-sweep-p01")
    page = (root / "sweep.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    for p in doc["points"]:
        assert (root / p["run_dir"] / "report.html").exists()
    assert (root / "runs" / "runs-summary.html").exists()
