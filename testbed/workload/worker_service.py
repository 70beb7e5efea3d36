"""A long-running Locust worker service for runs whose master is elsewhere.

``python -m testbed.workload.worker_service --rendezvous RUNS/.locust/current.json`` waits for
``mqbed run --external-workers N`` to publish a run in the rendezvous file (the run's worker
configuration, the master's address and port, how many workers it expects, a deadline),
claims one of the N worker slots (an exclusive claim file beside it, so two services never take
the same index), runs ``locust --worker`` for that run with the slot as ``MQBED_WORKER_INDEX``
(instance names and message ids stay unique), waits until the master ends it — or the deadline
passes — and then waits for the next run. Compose's ``locust-worker`` service runs this; ``--scale
locust-worker=N`` gives N of them. Locust builds its user classes from the scenario when it
imports the locustfile, so a worker process is started per run, after the run exists.

The run directory must be the same path for the service and for ``mqbed run`` (a shared
volume in compose). The rendezvous file and the run directory hold no broker password: the
service's workers take the credentials from its own ``$MQBED_BROKER_URLS`` (compose sets it),
else from the run's 0600 credentials file when this host and user can read it. Each worker
dies with the service (``PR_SET_PDEATHSIG``). ``--once`` serves one run and exits (tests);
``--max-idle`` bounds the wait for a run.

A worker on another host needs: the run directory at the same path (a shared filesystem: the
rendezvous file names the worker configuration, ``config``, and the log directory,
``log_dir``, by absolute path), the broker reachable at the endpoint that configuration names,
its credentials in ``$MQBED_BROKER_URLS``, and the master reachable at ``master_host``:
``master_port`` (``mqbed run --master-bind-host``/``--master-advertise``/``--master-bind-port``;
``master_host`` is null when the master binds a wildcard address without an advertised one,
and ``--master-host`` then says where it is). The other keys: ``seq`` (the run's id and
replication), ``workers`` (slots), ``prefix`` (log names), ``deadline`` (epoch seconds after
which the run no longer takes workers).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.backends.external import ENV_URLS
from testbed.backends.procs import Spawner
from testbed.workload.launcher import LOCUSTFILE, worker_args, worker_env

POLL = 0.2


def read_rendezvous(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) and "seq" in doc else None


def claim_slot(path: Path, doc: dict[str, Any]) -> int | None:
    """The first free worker index 1..N of this run (None: the run has all its workers)."""
    for i in range(1, int(doc["workers"]) + 1):
        claim = path.parent / f"{doc['seq']}.worker{i}.claim"
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            continue
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return i
    return None


def _secrets(doc: dict[str, Any]) -> str | None:
    """The run's credentials file — only for a service without broker URLs of its own (compose
    gives its workers ``$MQBED_BROKER_URLS``) that can read it (same host and user)."""
    path = doc.get("secrets")
    if os.environ.get(ENV_URLS) or not path or not os.access(path, os.R_OK):
        return None
    return str(path)


def serve_run(doc: dict[str, Any], index: int, host: str = "127.0.0.1") -> int:
    """Run ``locust --worker`` for one run until it ends or its deadline passes."""
    log_dir = Path(doc["log_dir"])
    log_dir.mkdir(parents=True, exist_ok=True)
    env = worker_env(doc["config"], index, _secrets(doc))
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE),
           *worker_args(host, int(doc["master_port"]))]  # fmt: skip
    with open(log_dir / f"{doc['prefix']}-worker{index}.log", "ab") as log:
        proc = Spawner.spawn(cmd, env=env, cwd=Path.cwd(), log=log, owned=True)
        try:
            left = float(doc["deadline"]) - time.time()
            return proc.wait(timeout=max(1.0, left))
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    return proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    continue
            return -1
        finally:
            if proc.poll() is None:  # interrupted: never leave the worker behind
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.workload.worker_service",
                                 description=__doc__.split("\n\n")[0])  # fmt: skip
    ap.add_argument(
        "--rendezvous",
        type=Path,
        required=True,
        metavar="FILE",
        help="the file `mqbed run --external-workers N` publishes the run in "
        "(RUNS/.locust/current.json, on a volume shared with the run)",
    )
    ap.add_argument(
        "--master-host",
        default=None,
        help="address of the Locust master (default: the one the run publishes in the "
        "rendezvous file, else 127.0.0.1)",
    )
    ap.add_argument("--once", action="store_true", help="serve one run, then exit")
    ap.add_argument("--max-idle", type=float, default=None, metavar="SECONDS",
                    help="exit after this long without a run (default: wait forever)")  # fmt: skip
    a = ap.parse_args(argv)
    served: set[str] = set()
    idle_since = time.monotonic()
    while True:
        doc = read_rendezvous(a.rendezvous)
        if doc is not None and doc["seq"] not in served and time.time() < float(doc["deadline"]):
            served.add(doc["seq"])
            index = claim_slot(a.rendezvous, doc)
            if index is not None:
                host = a.master_host or doc.get("master_host") or "127.0.0.1"
                print(f"worker {index} for {doc['seq']} at {host}:{doc['master_port']}", flush=True)
                rc = serve_run(doc, index, host)
                print(f"worker {index} for {doc['seq']} exited {rc}", flush=True)
                if a.once:
                    return 0
            idle_since = time.monotonic()
        if a.max_idle is not None and time.monotonic() - idle_since > a.max_idle:
            print(f"no run within {a.max_idle:g} s", file=sys.stderr)
            return 3
        time.sleep(POLL)


if __name__ == "__main__":
    sys.exit(main())
