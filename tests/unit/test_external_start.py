"""The external workers' start handshake: a configuration written with t=0 pending makes a
worker leave its ready marker and wait until the run rewrites the file with the real start."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from testbed.workload.config import T0_PENDING, WorkerConfig, ready_marker


def _config(t0_ns: int) -> WorkerConfig:
    return WorkerConfig(scenario_file="s.yaml", measured_dir="m", endpoint={"kind": "rabbitmq"},
                        t0_ns=t0_ns, run_id="r")  # fmt: skip


def test_worker_waits_for_the_fixed_start_and_marks_itself_ready(tmp_path: Path) -> None:
    path = tmp_path / "worker-config.r0.json"
    _config(T0_PENDING).write(path)
    seen: list[bool] = []

    def fix_start() -> None:
        deadline = time.monotonic() + 5
        while not ready_marker(path, 2).exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(ready_marker(path, 2).exists())
        _config(123_456_789).write(path)

    runner = threading.Thread(target=fix_start)
    runner.start()
    got = WorkerConfig.await_start(path, 2, timeout=10)
    runner.join(timeout=5)
    assert seen == [True]  # the marker came before the start was fixed
    assert got == replace(_config(0), t0_ns=123_456_789)
    assert ready_marker(path, 2).name == "worker-config.r0.ready2"
    assert not list(tmp_path.glob("*.tmp"))  # the rewrite is atomic (no partial file left)


def test_worker_gives_up_when_the_start_is_never_fixed(tmp_path: Path) -> None:
    path = tmp_path / "worker-config.r0.json"
    _config(T0_PENDING).write(path)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not fix its start within 0.3 s .*\(1\)"):
        WorkerConfig.await_start(path, 1, timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 3
