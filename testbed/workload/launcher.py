"""Start and stop Locust for one replication: headless (default), with its web UI, as a
master with N worker processes, or as a master for N *external* workers — processes started
elsewhere (compose's scalable ``locust-worker`` service, other hosts sharing the run directory)
by :mod:`testbed.workload.worker_service`, which find the run through a rendezvous file. Every
process started here gets its own process group, so stopping is exact (no name matching) and
bounded in time, and ``PR_SET_PDEATHSIG``: if `mqbed run` dies, even by SIGKILL, the kernel
kills its Locust processes (`refs` names them for the run's state entry, which `mqbed down`
reads). Broker credentials reach them through ``$MQBED_RUN_SECRETS`` (a 0600 file outside the
run directory), never through the run directory itself.
"""

from __future__ import annotations

__all__ = [
    "LocustLauncher",
    "write_rendezvous",
    "ENV_MASTER_ADVERTISE",
    "ENV_MASTER_HOST",
    "ENV_MASTER_PORT",
    "ENV_WEB_HOST",
    "ENV_WEB_PORT",
    "EXPECT_WORKERS_WAIT",
]

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed.backends.procs import ProcessRef, Spawner
from testbed.exceptions import MqbedError
from testbed.observe.process_cpu import DIRNAME as USAGE_DIRNAME
from testbed.workload.config import ENV_VAR
from testbed.workload.credentials import ENV_SECRETS

LOCUSTFILE = Path(__file__).resolve().parents[2] / "workloads" / "locustfile.py"


ENV_MASTER_HOST = "MQBED_LOCUST_MASTER_HOST"
"""Address the master binds for external workers (``mqbed run --master-bind-host``):
127.0.0.1 unless set; workers on other hosts need an address of this host they can reach (or
0.0.0.0 with ``ENV_MASTER_ADVERTISE``)."""
ENV_MASTER_PORT = "MQBED_LOCUST_MASTER_PORT"
"""Port the master binds for external workers (``--master-bind-port``; compose sets it); a
free one otherwise."""
ENV_MASTER_ADVERTISE = "MQBED_LOCUST_MASTER_ADVERTISE"
"""Address the rendezvous file tells workers to connect to (``--master-advertise``): the bind
address unless set; required when the master binds a wildcard address."""
WILDCARDS = ("0.0.0.0", "::", "*", "")
ENV_WEB_PORT = "MQBED_LOCUST_WEB_PORT"
"""Port of Locust's web UI (`--ui`); compose sets it from .env and publishes it on the host's
127.0.0.1. A free port otherwise."""
ENV_WEB_HOST = "MQBED_LOCUST_WEB_HOST"
"""Address the web UI binds: 127.0.0.1 unless set (compose's bridge network sets 0.0.0.0 inside
the container, so the port docker publishes on the host's 127.0.0.1 reaches it)."""
EXPECT_WORKERS_WAIT = 60
"""Seconds the master waits for its external workers before giving up."""
EXTERNAL_QUIT_FLOOR = 10.0
"""Seconds `LocustLauncher.stop` waits at least for external workers to write their last
records after the master has gone (their processes are not ours to wait on)."""
MARKER = "locust"
"""What the command line of every Locust process contains (``python -m locust ...``)."""


def worker_args(host: str, port: int) -> list[str]:
    """Command-line arguments of a Locust worker joining the master at `host`:`port` (local
    workers and the external worker service alike): warnings only, like the master, so a
    worker's log says what went wrong instead of the client library's connection chatter."""
    return ["--worker", "--master-host", host, "--master-port", str(port), "--loglevel", "WARNING"]


def worker_env(
    config_path: Path | str, worker_index: int, secrets: Path | str | None = None
) -> dict[str, str]:
    """Environment of a Locust process of a run: its config file, its worker slot and (when
    given) the file holding the broker credentials."""
    env = dict(os.environ)
    env[ENV_VAR] = str(config_path)
    env["MQBED_WORKER_INDEX"] = str(worker_index)
    env.pop(ENV_SECRETS, None)
    if secrets is not None:
        env[ENV_SECRETS] = str(secrets)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def write_rendezvous(path: Path, doc: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def master_address() -> tuple[str, str | None]:
    """(bind address, advertised address) of a master for external workers, from the
    environment (``ENV_MASTER_HOST``, ``ENV_MASTER_ADVERTISE``); the advertised one is None when
    the master binds a wildcard address and nothing says which one workers should use (each
    worker service then needs its own ``--master-host``)."""
    host = os.environ.get(ENV_MASTER_HOST) or "127.0.0.1"
    advertise = os.environ.get(ENV_MASTER_ADVERTISE) or (None if host in WILDCARDS else host)
    return host, advertise


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1" if host in WILDCARDS else host, 0))
        return int(s.getsockname()[1])


class LocustLauncher:
    """Locust processes of one replication."""

    def __init__(
        self,
        config_path: Path,
        out_dir: Path,
        users: int,
        run_time: float,
        workers: int = 1,
        ui: bool = False,
        locustfile: Path = LOCUSTFILE,
        external_workers: int = 0,
        rendezvous: Path | None = None,
        secrets: Path | None = None,
    ):
        self.config_path = config_path
        self.secrets = secrets
        self.out_dir = out_dir
        self.users = users
        self.run_time = run_time
        self.workers = workers
        self.ui = ui
        self.locustfile = locustfile
        self.external_workers = external_workers
        self.rendezvous = rendezvous
        if external_workers and rendezvous is None:
            raise MqbedError("external Locust workers need a rendezvous file")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.web_url: str | None = None
        self._logs: list[object] = []
        self._usage_before: set[str] = set()
        self.unfinished: list[int] = []
        """External worker slots that had not written their last records when `stop` ended."""

    def _spawn(self, args: list[str], worker_index: int, log_name: str) -> None:
        log = open(self.out_dir / log_name, "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        cmd = [sys.executable, "-m", "locust", "-f", str(self.locustfile), *args]
        env = worker_env(self.config_path, worker_index, self.secrets)
        proc = Spawner.spawn(cmd, env=env, cwd=Path.cwd(), log=log, owned=True)
        self.procs.append(proc)

    def refs(self) -> list[ProcessRef]:
        """Identities of the Locust processes started (for the run's state entry)."""
        return [ProcessRef.of(p.pid, MARKER) for p in self.procs]

    def start(self, prefix: str) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.external_workers:  # an earlier replication's workers left theirs
            self._usage_before = {p.name for p in self._usage_dir().glob("w*-*.json")}
        common = [
            "-u",
            str(self.users),
            "-r",
            str(max(1, self.users)),
            "--run-time",
            f"{max(1, int(self.run_time + 0.999))}s",
            "--stop-timeout",
            "15",
            "--csv",
            str(self.out_dir / prefix),
            "--html",
            str(self.out_dir / f"{prefix}.html"),
            "--loglevel",
            "WARNING",
        ]
        if self.ui:
            port = int(os.environ.get(ENV_WEB_PORT) or _free_port())
            host = os.environ.get(ENV_WEB_HOST) or "127.0.0.1"
            self.web_url = f"http://127.0.0.1:{port}"
            ui = ["--autostart", "--web-host", host, "--web-port", str(port)]
        else:
            ui = ["--headless"]
        if self.external_workers:
            self._start_for_external(prefix, [*common, *ui])
            return
        if self.workers <= 1:
            self._spawn([*common, *ui], 0, f"{prefix}.log")
            return
        port = _free_port()
        self._spawn(
            [
                *common,
                *ui,
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(port),
                "--expect-workers",
                str(self.workers),
            ],
            0,
            f"{prefix}-master.log",
        )
        for i in range(self.workers):
            self._spawn(
                worker_args("127.0.0.1", port),
                i + 1,
                f"{prefix}-worker{i + 1}.log",
            )

    def _start_for_external(self, prefix: str, args: list[str]) -> None:
        """The master only; the workers are told where it is through the rendezvous file."""
        assert self.rendezvous is not None
        host, advertise = master_address()
        port = int(os.environ.get(ENV_MASTER_PORT) or _free_port(host))
        self._spawn(
            [*args, "--master", "--master-bind-host", host,
             "--master-bind-port", str(port), "--expect-workers", str(self.external_workers),
             "--expect-workers-max-wait", str(EXPECT_WORKERS_WAIT)],
            0,
            f"{prefix}-master.log",
        )  # fmt: skip
        write_rendezvous(
            self.rendezvous,
            {
                "seq": f"{self.config_path.parent.name}.{prefix}",
                "config": str(self.config_path),
                "secrets": str(self.secrets) if self.secrets else None,
                "master_host": advertise,
                "master_port": port,
                "workers": self.external_workers,
                "log_dir": str(self.out_dir),
                "prefix": prefix,
                "deadline": time.time() + self.run_time + EXPECT_WORKERS_WAIT + 60,
            },
        )

    def _usage_dir(self) -> Path:
        return self.out_dir.parent / USAGE_DIRNAME

    def await_external_quit(self, deadline: float) -> list[int]:
        """Wait (until the monotonic `deadline`) for each external worker to have quit: its last
        act is its usage file (``measured/processes/w<slot>-<pid>.json``, written after its final
        records). The master's exit does not say so: it tells the workers to quit and goes, and
        a worker on a busy machine or in another container may still be writing its records,
        which the run merges next. Returns the slots that never wrote one."""
        slots = set(range(1, self.external_workers + 1))
        while True:
            new = {p.name for p in self._usage_dir().glob("w*-*.json")} - self._usage_before
            done = {n[1:].split("-", 1)[0] for n in new}  # "w<slot>-<pid>.json" -> "<slot>"
            missing = sorted(i for i in slots if str(i) not in done)
            if not missing or time.monotonic() >= deadline:
                return missing
            time.sleep(0.1)

    def unfinished_note(self) -> str:
        """What the run says when external workers never wrote their last records ('': all did)."""
        if not self.unfinished:
            return ""
        return (
            f"external Locust workers {self.unfinished} had not written their last records "
            "when the run stopped waiting for them: the ledger misses what they held"
        )

    def alive(self) -> bool:
        return bool(self.procs) and self.procs[0].poll() is None

    def check_started(self) -> None:
        """Raise with the log's tail if the (master) process died at start."""
        if self.procs and self.procs[0].poll() not in (None, 0):
            logs = sorted(self.out_dir.glob("*.log"))
            tail = logs[0].read_text(errors="replace")[-2000:] if logs else ""
            raise MqbedError(f"Locust exited with code {self.procs[0].returncode}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGINT the master (Locust stops its users and writes the CSV and HTML reports — on
        SIGTERM it would skip the HTML), then SIGTERM and finally SIGKILL every process group."""
        if self.procs and self.procs[0].poll() is None:
            try:
                self.procs[0].send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for sig, share in ((None, 0.7), (signal.SIGTERM, 1.0)):
            if sig is not None:
                for p in self.procs:
                    if p.poll() is None:
                        try:
                            os.killpg(p.pid, sig)
                        except ProcessLookupError:
                            pass
            until = time.monotonic() + share * max(0.0, deadline - time.monotonic())
            for p in self.procs:
                try:
                    p.wait(timeout=max(0.1, until - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # also any child left in the group
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.external_workers:
            floor = time.monotonic() + EXTERNAL_QUIT_FLOOR
            self.unfinished = self.await_external_quit(max(deadline, floor))
        for log in self._logs:
            log.close()  # type: ignore[attr-defined]
        self._logs.clear()
        if self.rendezvous is not None and self.external_workers:
            try:  # the run is over: no late worker may join it
                self.rendezvous.unlink()
            except FileNotFoundError:
                pass
        if self.secrets is not None:  # nobody needs the credentials any more
            self.secrets.unlink(missing_ok=True)
