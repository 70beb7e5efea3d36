"""A real short live run against RabbitMQ, its prediction, the Spark analysis and the report
page opened in headless Chromium: it loads without console errors, every plot has pixels,
and the verdict table has one row per judged metric. The screenshot and the page are kept in
``test-artifacts/``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from testbed.analysis.summary import DISTANCES, JUDGED
from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.report.build import build_report
from testbed.run import run_scenario

from .browser import Chromium

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIO = """\
name: e2e-report
seed: 3
duration: 6s
warmup: 1s
drain_timeout: 15s
broker: {kind: rabbitmq}
topology:
  queues: [{name: work, durable: true}]
producers:
  - {name: orders, count: 2, queue: work, arrival: {kind: poisson, rate: 100/s}, size: 1KB,
     confirms: true}
consumers:
  - {name: workers, queue: work, count: 2, prefetch: 10, ack: after_processing,
     service_time: {kind: exponential, mean: 2ms}}
"""


@pytest.mark.usefixtures("spark")  # the test process's warm Spark session, tests/conftest.py
def test_report_of_a_live_run_renders_in_chromium(
    tmp_path: Path,
    local_backend: LocalBackend,
    rabbitmq: BrokerEndpoint,
    artifacts_dir: Path,
) -> None:
    scenario = tmp_path / "e2e-report.yaml"
    scenario.write_text(SCENARIO)
    quiet = Console(stderr=True, quiet=True)
    run = run_scenario(
        scenario, home=local_backend.home, out_dir=tmp_path / "runs", predict=True,
        console=quiet, calibration="cached",  # the page, not the accuracy: no calibration run
    )  # fmt: skip
    (report,) = build_report([run.run_dir], console=quiet)
    summary = json.loads((run.run_dir / "analysis" / "summary.json").read_text())
    assert summary["prediction"] is True and summary["measured_replications"] == 1
    overall = [e for e in summary["metrics"] if e["queue"] is None]
    assert [e["metric"] for e in overall] == JUDGED + DISTANCES
    assert all(isinstance(e["within_target"], bool) for e in overall)
    throughput = overall[0]
    n = 200 * 5  # 2 × 100/s Poisson over the 5 s load window: within 4σ of 1,000 messages
    assert abs(throughput["measured"] * 5 - n) < 4 * n**0.5, throughput

    shutil.copy(report, artifacts_dir / "report-page.html")
    with Chromium(tmp_path / "chromium-profile") as browser:
        page = browser.open(report)
        assert page.errors == []
        assert page.evaluate("document.readyState") == "complete"
        images = page.evaluate(
            "[...document.querySelectorAll('img.plot')]"
            ".map(i => [i.id, i.complete, i.naturalWidth, i.naturalHeight])"
        )
        assert len(images) == 4, images
        assert all(done and w > 100 and h > 100 for _, done, w, h in images), images
        rows = page.evaluate(
            "[...document.querySelectorAll('#verdict tbody tr.metric-row')]"
            ".map(r => [r.dataset.metric, r.cells.length, r.cells[6].textContent.trim()])"
        )
        assert [r[0] for r in rows] == JUDGED + DISTANCES
        assert all(cells == 7 and mark in ("✓", "✗") for _, cells, mark in rows), rows
        status = page.evaluate("document.getElementById('status').textContent")
        assert status.startswith("Prediction accuracy: "), status
        shot = page.screenshot(artifacts_dir / "report-page.png")
    assert shot.stat().st_size > 10_000
    assert not page.errors
