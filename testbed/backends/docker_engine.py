"""A private Docker engine: ``dockerd`` with its own data root, exec root and socket.

For machines (and CI) where no Docker daemon runs: `DockerEngine(root).start()` launches
``dockerd --data-root ROOT/data --exec-root ROOT/exec -H unix://ROOT/docker.sock
--bridge=none --iptables=false`` — no bridge, no NAT rules: containers use host networking
only — and waits (bounded) until it answers. Images stay in ``ROOT/data`` between runs, so
offline builds are made once per machine. `stop()` ends only a daemon this object started,
by its PID (SIGTERM, then SIGKILL), never by name.

If a daemon already answers on ``ROOT/docker.sock`` (started by another process on the same
root), `start()` uses it and `stop()` leaves it running.

A run's engine (`engine_for_run`, recorded in the run's home so that ``mqbed down`` can stop
what a killed run started) is in `testbed.backends.run_engine`.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_ENGINE_ROOT",
    "DockerEngine",
    "HOME_LABEL",
    "reap_orphan_containers",
    "shared_engine",
    "start_engine_for",
    "stop_engine_for",
    "stop_engine_process",
]

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from testbed.backends.procs import (
    ProcessRef,
    signal_group,
    signal_process,
    start_ticks,
    wait_gone,
)
from testbed.core.atomic import atomic_write_text
from testbed.exceptions import BackendError

DEFAULT_ENGINE_ROOT = Path(
    os.environ.get("MQBED_DOCKER_ROOT", Path.home() / ".cache" / "mqbed" / "docker")
)
"""Where the private engine keeps images and state (``$MQBED_DOCKER_ROOT`` overrides)."""


_SYSTEM_SOCKET = Path("/var/run/docker.sock")


def _socket_answers(path: Path, timeout: float = 1.0) -> bool:
    """Whether a Docker API answers ``GET /_ping`` on the unix socket `path`."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = sock.recv(256)
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] + b" "


class DockerEngine:
    """One ``dockerd`` whose files all live under `root` (default `DEFAULT_ENGINE_ROOT`)."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root or DEFAULT_ENGINE_ROOT).expanduser().resolve()
        self.socket = self.root / "docker.sock"
        self.pidfile = self.root / "dockerd.pid"
        self.log_path = self.root / "dockerd.log"
        self.record_path = self.root / "mqbed-engine.json"
        """Identity of the daemon a `start` launched, so another process can `stop` it."""
        self.pid: int | None = None
        """PID of the daemon this object started; None when it reuses one (or none runs)."""
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        """``DOCKER_HOST`` value for this engine (``unix://ROOT/docker.sock``)."""
        return f"unix://{self.socket}"

    @property
    def owned(self) -> bool:
        return self.pid is not None

    def running(self) -> bool:
        return _socket_answers(self.socket)

    def start(
        self, timeout: float = 60.0, *, on_spawn: Callable[[ProcessRef], None] | None = None
    ) -> str:
        """Start the daemon unless one answers on our socket; return `host`.

        `on_spawn` is given the new daemon's identity as soon as it is launched (before it
        answers), so that a caller can record it where a killed caller's clean-up finds it
        (`testbed.backends.run_engine`); if it raises, the daemon is stopped again.

        Raises `BackendError` (with the log tail) when ``dockerd`` is missing, exits, or does
        not answer within `timeout` seconds.
        """
        if self.running():
            return self.host
        exe = shutil.which("dockerd")
        if exe is None:
            raise BackendError("dockerd not found on PATH: install the docker.io package")
        for sub in ("data", "exec"):
            (self.root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._remove_stale_pidfile()
        argv = [
            exe,
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.root / "exec"),
            "-H",
            self.host,
            "--pidfile",
            str(self.pidfile),
            "--bridge=none",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
        ]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== mqbed: starting dockerd at {time.ctime()} ===\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.root,
            )
        self.pid = self._proc.pid
        ref = ProcessRef(self.pid, self.pid, start_ticks(self.pid) or 0, str(self.root))
        try:
            atomic_write_text(self.record_path, json.dumps(ref.to_json()) + "\n")
            if on_spawn is not None:
                on_spawn(ref)
        except BaseException:
            self.stop()
            raise
        deadline = t0 + timeout
        while not self.running():
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self.pid = None
                raise BackendError(
                    f"dockerd exited with code {code} at start; log {self.log_path}:\n"
                    f"{self._log_tail()}"
                )
            if time.monotonic() >= deadline:
                self.stop()
                raise BackendError(
                    f"dockerd did not answer on {self.socket} within {timeout:.0f} s; "
                    f"log {self.log_path}:\n{self._log_tail()}"
                )
            time.sleep(0.1)
        self.startup_seconds = round(time.monotonic() - t0, 2)
        return self.host

    def stop(self, timeout: float = 30.0, *, recorded: bool = False) -> None:
        """SIGTERM the daemon this object started (SIGKILL after `timeout` s); else nothing.

        With `recorded`, a daemon that another process's `start` launched on this root (e.g.
        ``mqbed up``) is stopped too — by the PID in ``mqbed-engine.json``, only while that PID
        is still the same process (start time and command line checked).
        """
        proc, self._proc = self._proc, None
        if proc is None or self.pid is None:
            if recorded:
                self._stop_recorded(timeout)
            return
        self.record_path.unlink(missing_ok=True)
        self.pid = None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10.0)

    def _stop_recorded(self, timeout: float) -> None:
        try:
            ref = ProcessRef.from_json(json.loads(self.record_path.read_text()))
        except (OSError, ValueError, KeyError):
            return
        stop_engine_process(ref, timeout)
        self.record_path.unlink(missing_ok=True)

    def __enter__(self) -> DockerEngine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _remove_stale_pidfile(self) -> None:
        """dockerd refuses to start while its pidfile names a live process; drop dead ones."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            self.pidfile.unlink(missing_ok=True)
            return
        except PermissionError:
            pass
        raise BackendError(
            f"{self.pidfile} names PID {pid}, which runs but does not answer on {self.socket}; "
            "stop that dockerd (or remove the pidfile if the PID is not dockerd)"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def stop_engine_process(ref: ProcessRef, timeout: float = 30.0) -> bool:
    """Stop the ``dockerd`` `ref` names — only while it is still that process (start time, and
    its engine root in the command line): SIGTERM (it stops its containers and its
    containerd), SIGKILL to its process group after `timeout` s. Returns whether it was
    signalled; `BackendError` if it survives SIGKILL."""
    if not signal_process(ref, signal.SIGTERM):
        return False
    if wait_gone([ref], timeout):
        signal_group(ref, signal.SIGKILL)
        if wait_gone([ref], 10.0):
            raise BackendError(f"dockerd PID {ref.pid} survived SIGKILL")
    return True


def shared_engine() -> str | None:
    """The Docker API URL of an engine mqbed does not manage: ``$DOCKER_HOST`` if set, else
    the system daemon if it answers on /var/run/docker.sock; None when neither."""
    env = os.environ.get("DOCKER_HOST")
    if env:
        return env
    if _socket_answers(_SYSTEM_SOCKET):
        return f"unix://{_SYSTEM_SOCKET}"
    return None


_OWNER_FILE = "docker-engine.json"


def start_engine_for(
    home: Path | str, root: Path | str | None = None, timeout: float = 60.0
) -> str:
    """A Docker API URL for ``mqbed up --backend docker`` in testbed `home` (engine left running).

    ``$DOCKER_HOST``, else the system daemon, else the private engine under `root` — started
    here if needed, and then recorded in ``home/docker-engine.json`` so that `stop_engine_for`
    (``mqbed down``) stops it again.
    """
    shared = shared_engine()
    if shared:
        return shared
    engine = DockerEngine(root)
    host = engine.start(timeout)
    if engine.owned:
        Path(home).mkdir(mode=0o700, parents=True, exist_ok=True)
        (Path(home) / _OWNER_FILE).write_text(json.dumps({"root": str(engine.root)}) + "\n")
    return host


def stop_engine_for(home: Path | str, timeout: float = 30.0) -> bool:
    """Stop the private engine `start_engine_for(home)` started, unless containers of another
    testbed still run on it. Returns whether an engine was stopped."""
    owner = Path(home) / _OWNER_FILE
    try:
        root = Path(json.loads(owner.read_text())["root"])
    except (OSError, ValueError, KeyError):
        return False
    engine = DockerEngine(root)
    if engine.running():
        import docker

        client = docker.DockerClient(base_url=engine.host, timeout=30)
        try:
            others = [
                c
                for c in client.containers.list()
                if c.labels.get(HOME_LABEL) != str(Path(home).resolve())
            ]
        finally:
            client.close()
        if others:
            owner.unlink(missing_ok=True)
            return False
    engine.stop(timeout, recorded=True)
    owner.unlink(missing_ok=True)
    return True


HOME_LABEL = "org.mqbed.home"
"""The label every container mqbed makes carries: the testbed home it belongs to."""


def _answering_engines() -> list[str]:
    """Docker API URLs of the engines mqbed may have used that answer now, without starting
    one: ``$DOCKER_HOST``, the system daemon, the private engine."""
    hosts = []
    env = os.environ.get("DOCKER_HOST")
    if env:
        hosts.append(env)
    if _socket_answers(_SYSTEM_SOCKET):
        hosts.append(f"unix://{_SYSTEM_SOCKET}")
    private = DockerEngine()
    if private.running() and private.host not in hosts:
        hosts.append(private.host)
    return hosts


def reap_orphan_containers(timeout: float = 30.0) -> list[str]:
    """Remove the containers mqbed made for a testbed home that no longer exists — a run or a
    test session killed before its clean-up, whose home (state file included) was then deleted,
    so no ``mqbed down --home`` can name them any more — on every engine that answers; return
    their names. A container whose home exists is left alone: that testbed may be in use, and
    its own ``mqbed down`` stops it."""
    import docker

    removed: list[str] = []
    for host in _answering_engines():
        client = docker.DockerClient(base_url=host, timeout=int(max(timeout, 5)))
        try:
            for c in client.containers.list(all=True, filters={"label": HOME_LABEL}):
                home = c.labels.get(HOME_LABEL, "")
                if home and not Path(home).exists():
                    c.remove(force=True)
                    removed.append(c.name)
        except docker.errors.DockerException as exc:
            raise BackendError(f"could not list or remove containers on {host}: {exc}") from exc
        finally:
            client.close()
    return removed
