"""A Locust worker whose process stalls for seconds (CPU starvation on a loaded machine, a long
import, a GC pause) stays in the run: Locust's default liveness (3 missed one-second
heartbeats) would drop it and, once the last worker is gone, stop the whole test, so the run
measured nothing after the stall (CI, 2026-11-26: a compose run published no message at all).
The stall here is real: both worker processes of a ``--workers 2`` run are SIGSTOPped."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.run import run_scenario
from testbed.workload.config import WORKER_LIVENESS

STALL = 7.0
"""Seconds both workers are stopped: beyond Locust's default liveness (about 4 s), within ours."""
STALL_AT = 2.0
"""Run-clock second the stall starts (inside the load window)."""

SCENARIO = """
name: stall
duration: 14s
warmup: 1s
topology: {queues: [{name: sq}]}
producers: [{name: p, count: 2, queue: sq, arrival: {kind: poisson, rate: 40/s}, confirms: true}]
consumers: [{name: c, queue: sq, count: 2}]
"""

pytestmark = pytest.mark.integration


def _t0_ns(runs: Path, deadline: float) -> int:
    """The run's fixed t=0, once its worker configuration holds it."""
    while time.monotonic() < deadline:
        for cfg in runs.glob("*/worker-config.r0.json"):
            try:
                t0 = int(json.loads(cfg.read_text())["t0_ns"])
            except (ValueError, KeyError, OSError):
                continue
            if t0:
                return t0
        time.sleep(0.05)
    raise AssertionError("the run never fixed its t=0")


def _is_worker(proc: psutil.Process) -> bool:
    """A live Locust worker; a child that has exited meanwhile (a zombie not yet reaped by the
    run, seen in make test) is not one."""
    try:
        return proc.is_running() and "--worker" in proc.cmdline()
    except psutil.Error:
        return False


def _locust_workers(deadline: float) -> list[psutil.Process]:
    """This test's two Locust worker processes (children of this process, started by the run)."""
    while time.monotonic() < deadline:
        found = [c for c in psutil.Process().children(recursive=True) if _is_worker(c)]
        if len(found) == 2:
            return found
        time.sleep(0.1)
    raise AssertionError("the run's two Locust workers never started")


def test_workers_stalled_longer_than_locust_default_liveness_stay_in_the_run(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    assert STALL < WORKER_LIVENESS
    f = tmp_path / "scenario.yaml"
    f.write_text(SCENARIO)
    runs = tmp_path / "runs"
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = run_scenario(f, home=local_backend.home, out_dir=runs, predict=False,
                                         console=Console(stderr=True, quiet=True), workers=2)  # fmt: skip
        except BaseException as e:  # reported by the test thread
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    t0_ns = _t0_ns(runs, deadline)
    workers = _locust_workers(deadline)
    time.sleep(max(0.0, (t0_ns / 1e9 + STALL_AT) - time.time()))
    stalled = []
    try:
        for w in workers:
            os.kill(w.pid, signal.SIGSTOP)
            stalled.append(w)
        stall_start = time.time() - t0_ns / 1e9
        time.sleep(STALL)
    finally:
        for w in stalled:
            os.kill(w.pid, signal.SIGCONT)
    stall_end = time.time() - t0_ns / 1e9
    thread.join(timeout=150)
    assert not thread.is_alive(), "the run did not end"
    assert "error" not in box, box.get("error")
    measured = box["result"].run_dir / "measured"
    ledger = json.loads((measured / "ledger.json").read_text())
    assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"], ledger
    t = pq.read_table(measured / "messages.parquet").to_pandas()
    during = t[(t.t_publish > stall_start + 0.3) & (t.t_publish < stall_end - 0.3)]
    assert during.empty, during  # the stall was real: nobody published while stopped
    d = pq.read_table(measured / "deliveries.parquet").to_pandas()
    sent_after = t[t.t_publish > stall_end + 0.5]
    got_after = d[d.t_deliver > stall_end + 0.5]
    # the test went on after the stall, in both workers (Locust's default would have stopped it;
    # Locust may place both producers in one worker and both consumers in the other)
    slots = set(sent_after.msg_id.str.split(".").str[3]) | set(
        got_after.consumer.str.split(".").str[1]
    )
    assert slots == {"1", "2"}, (len(sent_after), len(got_after))
    master = (measured / "locust" / "r0-master.log").read_text(errors="replace")
    assert "went missing" not in master and "failed to send heartbeat" not in master
