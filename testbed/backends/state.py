"""The local backend's state file (``HOME/state.json``) and the lock that guards it.

The state file is the only thing `mqbed down` (possibly a fresh process) needs: which processes
this testbed started (PID, process group, start time, cmdline marker), on which ports, with which
generated credentials. It is written atomically and is readable by its owner only.

A live run has a state entry of its own, ``HOME/runs/<run_id>/run.json`` (`RunRecord`): the
`mqbed run` process and the Locust processes it started, so that `mqbed down` can stop what a
killed run left behind and remove its directory (the run's own broker home, if it had one).
"""

from __future__ import annotations

__all__ = ["HomeLock", "NodeRecord", "RunRecord", "TestbedState", "testbed_id"]

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from testbed.backends.procs import ProcessRef
from testbed.exceptions import BackendError, ConfigurationError

STATE_VERSION = 1
RUN_RECORD = "run.json"


def testbed_id(home: Path) -> str:
    """A short stable id for the testbed living in `home` (used in node and broker names)."""
    return hashlib.sha1(str(home.resolve()).encode()).hexdigest()[:8]


@dataclass
class NodeRecord:
    """One broker node: what it is, where it listens, how to log in, which process runs it.

    `process` is None before the first start; after a stop or kill it keeps naming the dead
    process (`restart_node` replaces it).
    """

    name: str
    kind: Literal["rabbitmq", "activemq"]
    node_dir: str
    ports: dict[str, int]
    username: str
    password: str
    detached: bool
    params: dict[str, Any] = field(default_factory=dict)
    process: ProcessRef | None = None
    owner_pid: int | None = None
    version: str | None = None
    startup_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "process"}
        data["process"] = self.process.to_json() if self.process else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeRecord:
        data = dict(data)
        proc = data.pop("process", None)
        return cls(**data, process=ProcessRef.from_json(proc) if proc else None)


@dataclass
class TestbedState:
    """Everything one testbed home runs: an optional epmd (for RabbitMQ nodes) and the nodes."""

    testbed_id: str
    home: str
    nodes: list[NodeRecord] = field(default_factory=list)
    epmd: ProcessRef | None = None
    epmd_port: int | None = None
    epmd_detached: bool = True

    def node(self, name: str) -> NodeRecord:
        for rec in self.nodes:
            if rec.name == name:
                return rec
        known = ", ".join(r.name for r in self.nodes) or "none"
        raise BackendError(f"no node named {name!r} in testbed {self.home} (nodes: {known})")

    def used_ports(self) -> set[int]:
        ports = {p for rec in self.nodes for p in rec.ports.values()}
        if self.epmd_port:
            ports.add(self.epmd_port)
        return ports

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "testbed_id": self.testbed_id,
            "home": self.home,
            "epmd": self.epmd.to_json() if self.epmd else None,
            "epmd_port": self.epmd_port,
            "epmd_detached": self.epmd_detached,
            "nodes": [rec.to_json() for rec in self.nodes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: Path) -> TestbedState:
        if data.get("version") != STATE_VERSION:
            raise ConfigurationError(
                f"{source}: version: expected {STATE_VERSION}, got {data.get('version')!r}"
            )
        try:
            return cls(
                testbed_id=str(data["testbed_id"]),
                home=str(data["home"]),
                nodes=[NodeRecord.from_json(n) for n in data.get("nodes", [])],
                epmd=ProcessRef.from_json(data["epmd"]) if data.get("epmd") else None,
                epmd_port=data.get("epmd_port"),
                epmd_detached=bool(data.get("epmd_detached", True)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"{source}: malformed state file: {exc!r}") from exc

    @classmethod
    def load(cls, path: Path) -> TestbedState | None:
        """Read the state file, or None when there is none."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
        return cls.from_json(data, source=path)

    def save(self, path: Path) -> None:
        """Write atomically (temp file + rename), mode 0600: it holds credentials."""
        _write_private(path, self.to_json())


@dataclass
class RunRecord:
    """The processes of one live run: its `mqbed run` process (`owner`) and the ones it started."""

    run_id: str
    owner: ProcessRef
    processes: list[ProcessRef] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "run_id": self.run_id,
            "owner": self.owner.to_json(),
            "processes": [p.to_json() for p in self.processes],
        }

    @classmethod
    def load(cls, path: Path) -> RunRecord | None:
        """The record at `path`; None when there is none or it cannot be read."""
        try:
            data = json.loads(path.read_text())
            return cls(
                run_id=str(data["run_id"]),
                owner=ProcessRef.from_json(data["owner"]),
                processes=[ProcessRef.from_json(p) for p in data.get("processes", [])],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        _write_private(path, self.to_json())


def _write_private(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` as JSON atomically (temp file + rename), mode 0600 from creation on."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


class HomeLock:
    """Exclusive lock on a testbed home: one `up`/`down`/node operation at a time.

    Re-entrant within a process (the same object may be entered by nested calls); across
    processes it is an ``flock`` on ``HOME/.lock`` waited for at most `timeout` seconds.
    """

    def __init__(self, home: Path, timeout: float = 120.0) -> None:
        self.path = home / ".lock"
        self.timeout = timeout
        self._rlock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> HomeLock:
        self._rlock.acquire()
        if self._depth == 0:
            try:
                self._fd = self._acquire()
            except BaseException:
                self._rlock.release()
                raise
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._rlock.release()

    def _acquire(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise BackendError(
                        f"testbed home {self.path.parent} is locked by another mqbed process "
                        f"(waited {self.timeout:.0f} s for {self.path})"
                    ) from None
                time.sleep(0.1)
