"""What a workload process (a Locust master/worker) needs to know, passed as one JSON file.

`mqbed run` writes it into the run directory and points ``MQBED_RUN_CONFIG`` at it; the
locustfile reads it. The copy in the run directory has the broker passwords masked; the
process gets them as :mod:`testbed.workload.credentials` describes. Times are on one clock:
`t0_ns` is the workload start (t=0) in ``time.time_ns()`` units, shared by every process on
the host (`testbed.core.clock.RunClock`).

With *external* workers (`mqbed run --external-workers N`) the start is not known when the file
is first written: workers started elsewhere import at their own pace, so `t0_ns` is
``T0_PENDING`` until every one of them is ready. A worker's first user then leaves a ready
marker beside the file (`ready_marker`) and waits (`await_start`) until the run rewrites the
file with the real t=0; the run fixes t=0 only once all N markers are there. A late worker so
delays the start instead of missing the load window.
"""

from __future__ import annotations

__all__ = [
    "WorkerConfig",
    "ENV_VAR",
    "HDR_TYPE",
    "HDR_ATTEMPT",
    "T0_PENDING",
    "WORKER_LIVENESS",
    "ready_marker",
]

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.workload.credentials import fill_credentials, split_credentials, write_secrets

ENV_VAR = "MQBED_RUN_CONFIG"
HDR_TYPE = "x-mqbed-type"
"""Header: message type label (per-type latency tables for message-driven chains)."""
T0_PENDING = 0
"""`t0_ns` of a configuration whose start is not fixed yet (external workers still joining)."""
HDR_ATTEMPT = "x-mqbed-attempt"
"""Header: delivery attempt number carried by re-enqueued copies (visibility timeout)."""
WORKER_LIVENESS = 30
"""Heartbeats (one a second) a Locust master lets a worker miss before it drops the worker.
Locust's default, 3, drops a worker whose process stalls about 4 s, and when the last one goes
it stops the whole test. On a loaded 2-core CI machine a compose run with two workers measured
nothing that way: the master's user count fell from 4 to 0 while the run fixed t=0, and the
workers, back 3 s later, connected to the broker only to be told to stop. A worker that really
died is caught by the run itself (its users' records stop, the drain times out, the ledger
counts the loss), so a long grace costs nothing."""


@dataclass(frozen=True)
class WorkerConfig:
    scenario_file: str
    """The resolved scenario.yaml in the run directory."""
    measured_dir: str
    endpoint: dict[str, Any]
    """A `BrokerEndpoint.to_json()` the clients connect to (possibly via the fault proxy)."""
    t0_ns: int
    replication: int = 0
    seed: int = 1
    run_id: str = ""
    """Makes message ids unique across runs: leftovers of another run count as unexpected."""
    stop_producers_at: float = 0.0
    """Seconds after t0 when producers stop (the scenario's duration)."""
    consumer_endpoint: dict[str, Any] | None = None
    """Where consumers connect when it differs from producers (separate fault-proxy links)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, path: Path, secrets: Path | None = None) -> None:
        """Write the configuration to `path`; with `secrets`, the broker credentials go to that
        0600 file instead and `path` holds them masked."""
        doc = asdict(self)
        if secrets is not None:
            doc, creds = split_credentials(doc)
            write_secrets(secrets, creds)
        tmp = path.with_name(path.name + ".tmp")  # atomic: workers may be polling the file
        tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path | str, environ: Mapping[str, str] | None = None) -> WorkerConfig:
        """The configuration at `path`, masked credentials filled from `environ` (default: the
        process environment)."""
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(**fill_credentials(doc, os.environ if environ is None else environ))

    @classmethod
    def from_env(cls) -> WorkerConfig:
        path = os.environ.get(ENV_VAR)
        if not path:
            raise RuntimeError(
                f"{ENV_VAR} is not set: this locustfile is started by 'mqbed run', which writes "
                "the run configuration and points the variable at it"
            )
        return cls.read(path)

    @classmethod
    def await_start(cls, path: Path | str, worker_index: int, timeout: float) -> WorkerConfig:
        """Leave this worker's ready marker and return the configuration once its start is
        fixed (`t0_ns` no longer ``T0_PENDING``); raise after `timeout` seconds."""
        marker = ready_marker(path, worker_index)
        marker.write_text(f"{os.getpid()}\n", encoding="utf-8")
        deadline = time.monotonic() + timeout
        while True:
            config = cls.read(path)
            if config.t0_ns != T0_PENDING:
                return config
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{path}: the run did not fix its start within {timeout:g} s of this "
                    f"worker ({worker_index}) being ready"
                )
            time.sleep(0.05)  # gevent-patched in Locust: the other greenlets keep running


def ready_marker(config_path: Path | str, worker_index: int) -> Path:
    """The file an external worker creates beside the run's configuration once it is ready."""
    path = Path(config_path)
    return path.with_name(f"{path.stem}.ready{worker_index}")
