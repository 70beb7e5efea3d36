"""The commands a user types, through the installed ``mqbed`` console script (not CliRunner):
``predict`` with both methods, its run directory, its JSON document, and ``down`` on a home
with nothing up. No broker: a prediction needs only the scenario and a profile (the shipped one
here, the home being empty), so the round trip takes seconds."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "workloads" / "scenarios" / "quickstart.yaml"
MQBED = Path(sys.executable).with_name("mqbed")


def mqbed(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The installed ``mqbed`` with `args` (`env` added to this process's), output captured."""
    return subprocess.run(
        [str(MQBED), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip


def _overall(doc: dict, metric: str) -> float:
    (m,) = [
        m
        for m in doc["metrics"]
        if m["metric"] == metric and m["queue"] is None and m["flow"] is None
    ]
    return float(m["predicted"])


def test_predict_simulates_into_a_run_directory_and_says_so_in_json(tmp_path: Path) -> None:
    home, run = tmp_path / "home", tmp_path / "run"
    done = mqbed(
        "predict", str(QUICKSTART), "--replications", "2", "--run-dir", str(run),
        "--home", str(home), "--json", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] is True and doc["exit_code"] == 0 and doc["method"] == "simulate"
    assert doc["profile"]["origin"] == "shipped", doc["profile"]  # an empty home: no cache
    # two producers at 100/s for the 60 s scenario: 12,000 a replication, Poisson within 4 sigma
    sent = doc["ledger"]["mean"]["sent"]
    assert abs(sent - 12_000) < 4 * math.sqrt(12_000), sent
    ledger = doc["ledger"]["mean"]
    assert ledger["lost"] == 0 and ledger["delivered_unique"] == ledger["confirmed"] == sent
    p50, p95, p99 = (_overall(doc, f"latency_p{q}_s") for q in (50, 95, 99))
    assert 0 < p50 < p95 < p99 < 1.0, (p50, p95, p99)
    assert _overall(doc, "throughput_msg_s") == pytest.approx(200, rel=0.05)
    # the run directory holds what the document summarises, per-message records included
    summary = json.loads((run / "predicted" / "summary.json").read_text())
    assert summary["metrics"] == doc["metrics"] and summary["replications"] == 2
    for name in ("messages", "deliveries", "events", "timeseries"):
        assert (run / "predicted" / f"{name}.parquet").stat().st_size > 0, name
    assert (run / "predicted" / "profile.yaml").is_file()
    assert "replication 1:" in done.stderr  # progress on stderr, the document alone on stdout


def test_predict_analytic_answers_mmn_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    one = tmp_path / "prefetch1.yaml"
    one.write_text(QUICKSTART.read_text().replace("prefetch: 10", "prefetch: 1"))
    done = mqbed("predict", str(one), "--method", "analytic", "--json",
                 "--home", str(tmp_path / "home"), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    p50, mean, p99 = (
        _overall(doc, m) for m in ("latency_p50_s", "latency_mean_s", "latency_p99_s")
    )
    # percentiles of the response-time distribution, not the mean copied into them
    assert p50 < mean < p99, (p50, mean, p99)
    assert _overall(doc, "throughput_msg_s") == pytest.approx(200.0)
    # the quickstart as shipped (prefetch 10) is outside M/M/n: refused, naming why, exit 3
    done = mqbed("predict", str(QUICKSTART), "--method", "analytic", "--json",
                 "--home", str(tmp_path / "home"), cwd=tmp_path)  # fmt: skip
    doc = json.loads(done.stdout)
    assert done.returncode == 3 and doc["ok"] is False and doc["exit_code"] == 3
    assert "prefetch" in doc["error"] and "--method simulate" in doc["error"], doc["error"]


def test_down_on_a_home_with_nothing_up_stops_nothing_and_succeeds(tmp_path: Path) -> None:
    done = mqbed("down", "--home", str(tmp_path / "home"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is True and doc["stopped"] == []
    text = mqbed("down", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert text.returncode == 0 and "nothing was running" in text.stdout + text.stderr
