"""`mqbed run --json` live, as a script calls it: one JSON document on stdout while Locust's
processes run, the overrides applied, the thresholds judged on the measured ledger, exit 6 on a
miss. A ~2 s run on the session's RabbitMQ (no prediction, no Spark: ledger thresholds only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import testbed
from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend

pytestmark = pytest.mark.integration
REPO = Path(testbed.__file__).resolve().parents[1]
SCENARIO = """\
name: cli-json
duration: 30s
drain_timeout: 10s
topology: {queues: [{name: jq}]}
producers: [{name: p, queue: jq, arrival: {kind: constant, rate: 5/s}, confirms: true}]
consumers: [{name: c, queue: jq}]
thresholds: [lost == 0]
"""


def test_run_json_overrides_and_a_missed_threshold(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "testbed.cli", "run", "s.yaml", "--json", "--no-predict",
           "--no-report", "--home", str(local_backend.home), "--out", str(tmp_path / "runs"),
           "--duration", "2s", "--rate", "50/s", "--threshold", "sent < 20"]  # fmt: skip
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads(run.stdout)  # exactly one document, nothing else on stdout
    assert run.returncode == 6 and doc["exit_code"] == 6 and doc["ok"] is False, run.stderr
    judged = {t["threshold"]: (t["ok"], t["measured"]) for t in doc["thresholds"]}
    assert judged["lost == 0"] == (True, 0.0)
    ok, sent = judged["sent < 20"]
    assert not ok and 80 <= sent <= 120, sent  # 50/s for 2 s (not 5/s for 30 s)
    assert "Thresholds (SLOs, measured run): 1 of 2 met" in run.stderr
    assert "duration: 2.0" in (Path(doc["run_dir"]) / "scenario.yaml").read_text()
