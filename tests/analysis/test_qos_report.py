"""The QoS loss table through the whole analysis job and report (no broker: both sides of the run
directory are simulator output, the "measured" one with another seed's replications)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console

from emulator.predict import predict
from testbed.core.scenario_loader import load_scenario
from testbed.report.build import build_report

LIBRARY = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def test_qos_run_gets_the_three_way_loss_table(spark: SparkSession, tmp_path: Path) -> None:
    text = (LIBRARY / "qos-pc.yaml").read_text().replace("duration: 60s", "duration: 30s")
    run_dir = tmp_path / "20261121T000000Z-qos-pc"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(text)
    scenario = load_scenario(run_dir / "scenario.yaml")
    other = tmp_path / "other"
    predict(scenario.model_copy(update={"seed": 7}), other, replications=1, processes=1)
    shutil.move(other / "predicted", run_dir / "measured")
    predict(scenario, run_dir, replications=3, processes=1)

    (report,) = build_report([run_dir], console=Console(stderr=True, quiet=True))
    summary = json.loads((run_dir / "analysis" / "summary.json").read_text())
    table = summary["qos_loss"]
    assert table["qos"] == "PC" and table["window"] == [0.0, 30.0]
    rows = {r["source"]: r for r in table["rows"]}
    assert list(rows) == ["measured", "simulated", "closed_form"]
    measured = json.loads((run_dir / "measured" / "ledger.json").read_text())
    undelivered = measured["sent"] - measured["delivered_unique"] - measured["dead_lettered"]
    assert rows["measured"]["undelivered"] == [undelivered]
    assert rows["measured"]["loss_rate"] == undelivered / 30.0
    assert rows["simulated"]["replications"] == 3 and len(rows["simulated"]["sent"]) == 3
    assert rows["closed_form"]["terms"]["broker_down"] > 0
    assert "metrics" in summary and "ledger" in summary  # nothing renamed
    html = report.read_text()
    assert 'id="qos-loss"' in html and "closed form (§6)" in html
    assert "Loss by QoS" in (run_dir / "summary.md").read_text()
