"""`mqbed run --external-workers N`: the run starts the Locust master only; N long-running
worker services (compose's `locust-worker`, here plain processes) find it through the
rendezvous file, claim distinct worker slots, serve the run and wait for the next one. The run
fixes t=0 only when every worker is ready, so a worker that joins late delays the start instead
of missing the load window; one that never comes fails the run, naming how many came."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.exceptions import MqbedError
from testbed.run import run_scenario
from testbed.workload.launcher import _free_port

LATE = 16.0
"""Seconds the second worker service starts after the run: beyond the fixed 15 s head start
runs once gave external workers (a slow worker then found the producers already stopped)."""

SCENARIO = """
name: external
duration: 4s
topology: {queues: [{name: xq}]}
producers: [{name: p, count: 2, queue: xq, arrival: {kind: poisson, rate: 50/s}, confirms: true}]
consumers: [{name: c, queue: xq, count: 2}]
"""


def _service(rendezvous: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed.workload.worker_service", "--rendezvous", str(rendezvous),
         "--once", "--max-idle", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


pytestmark = pytest.mark.integration


def test_external_worker_services_serve_a_run(
    tmp_path: Path,
    local_backend: LocalBackend,
    rabbitmq: BrokerEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The master binds the address and port it is given (here 127.0.0.2, a loopback address
    nothing else uses, as `--master-bind-host`/`--master-bind-port` set them) and the worker
    services, given no --master-host, join it where the rendezvous file says."""
    port = _free_port("127.0.0.2")
    monkeypatch.setenv("MQBED_LOCUST_MASTER_HOST", "127.0.0.2")
    monkeypatch.setenv("MQBED_LOCUST_MASTER_PORT", str(port))
    runs = tmp_path / "runs"
    rendezvous = runs / ".locust" / "current.json"
    services = [_service(rendezvous)]
    late = threading.Timer(LATE, lambda: services.append(_service(rendezvous)))
    late.start()
    try:
        f = tmp_path / "scenario.yaml"
        f.write_text(SCENARIO)
        started = time.monotonic()
        result = run_scenario(f, home=local_backend.home, out_dir=runs, predict=False,
                              console=Console(stderr=True, quiet=True), external_workers=2)  # fmt: skip
        assert time.monotonic() - started > LATE  # the run waited for its late worker
        outputs = [s.communicate(timeout=60)[0].decode() for s in services]
        assert [s.returncode for s in services] == [0, 0], outputs
    finally:
        late.cancel()
        late.join(timeout=5)
        for s in services:
            if s.poll() is None:
                os.killpg(s.pid, signal.SIGKILL)
                s.wait(timeout=10)
    claimed = sorted(o.split()[1] for o in outputs)
    assert claimed == ["1", "2"], outputs  # each service took its own slot
    assert all(f" at 127.0.0.2:{port}\n" in o for o in outputs), outputs  # where the run said
    measured = result.run_dir / "measured"
    ledger = json.loads((measured / "ledger.json").read_text())
    assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"] > 250
    t0_ns = json.loads((result.run_dir / "worker-config.r0.json").read_text())["t0_ns"]
    assert m_first_after(measured, t0_ns)  # nobody published before the fixed t=0
    m = pq.read_table(measured / "messages.parquet").to_pandas()
    d = pq.read_table(measured / "deliveries.parquet").to_pandas()
    workers = set(m.msg_id.str.split(".").str[3]) | set(d.consumer.str.split(".").str[1])
    assert workers == {"1", "2"}  # the users ran in the two external workers
    logs = sorted(p.name for p in (measured / "locust").glob("*.log"))
    assert logs == ["r0-master.log", "r0-worker1.log", "r0-worker2.log"]
    assert not rendezvous.exists()  # the finished run no longer invites workers


def m_first_after(measured: Path, t0_ns: int) -> bool:
    """Every message was published at or after t=0 and the load filled the window's start."""
    t = pq.read_table(measured / "messages.parquet").column("t_publish").to_pylist()
    return t0_ns > 0 and min(t) >= -0.05 and min(t) < 0.5


def test_run_without_its_external_workers_fails_naming_them(
    tmp_path: Path, local_backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No worker service watches the rendezvous: the run gives up after its bounded wait with
    an error that says how many workers came and what to start, and leaves no Locust behind."""
    import testbed.replication as replication

    monkeypatch.setattr(replication, "EXTERNAL_READY_WAIT", 4.0)
    runs = tmp_path / "runs"
    f = tmp_path / "scenario.yaml"
    f.write_text(SCENARIO)
    with pytest.raises(MqbedError, match=r"0 of 2 external Locust workers ready .*locust-worker=2"):
        run_scenario(f, home=local_backend.home, out_dir=runs, predict=False,
                     console=Console(stderr=True, quiet=True), external_workers=2)  # fmt: skip
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert (run_dir / "scenario.yaml").is_file()  # the run directory stays readable
    assert not (runs / ".locust" / "current.json").exists()  # no invitation left open
    import psutil

    locusts = [c for c in psutil.Process().children(recursive=True)
               if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
               and "locust" in " ".join(c.cmdline())]  # fmt: skip
    assert locusts == []  # the master was stopped
