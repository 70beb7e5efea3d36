"""`mqbed run --external-workers N`: the run starts the Locust master only; N long-running
worker services (compose's `locust-worker`, here plain processes) find it through the
rendezvous file, claim distinct worker slots, serve the run and wait for the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.run import run_scenario

pytestmark = pytest.mark.integration


def test_external_worker_services_serve_a_run(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    runs = tmp_path / "runs"
    rendezvous = runs / ".locust" / "current.json"
    services = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.workload.worker_service",
                "--rendezvous",
                str(rendezvous),
                "--once",
                "--max-idle",
                "120",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    try:
        f = tmp_path / "scenario.yaml"
        f.write_text("""
name: external
duration: 4s
topology: {queues: [{name: xq}]}
producers: [{name: p, count: 2, queue: xq, arrival: {kind: poisson, rate: 50/s}, confirms: true}]
consumers: [{name: c, queue: xq, count: 2}]
""")
        result = run_scenario(f, home=local_backend.home, out_dir=runs, predict=False,
                              console=Console(stderr=True, quiet=True), external_workers=2)  # fmt: skip
        outputs = [s.communicate(timeout=60)[0].decode() for s in services]
        assert [s.returncode for s in services] == [0, 0], outputs
    finally:
        for s in services:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGKILL)
                s.wait(timeout=10)
    claimed = sorted(o.split()[1] for o in outputs)
    assert claimed == ["1", "2"], outputs  # each service took its own slot
    measured = result.run_dir / "measured"
    ledger = json.loads((measured / "ledger.json").read_text())
    assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"] > 250
    m = pq.read_table(measured / "messages.parquet").to_pandas()
    d = pq.read_table(measured / "deliveries.parquet").to_pandas()
    workers = set(m.msg_id.str.split(".").str[3]) | set(d.consumer.str.split(".").str[1])
    assert workers == {"1", "2"}  # the users ran in the two external workers
    logs = sorted(p.name for p in (measured / "locust").glob("*.log"))
    assert logs == ["r0-master.log", "r0-worker1.log", "r0-worker2.log"]
    assert not rendezvous.exists()  # the finished run no longer invites workers
