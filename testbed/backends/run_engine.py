"""The Docker engine of one docker-backend run, recorded in the run's home, and what
``mqbed down`` (or the next run) does with the home of such a run once it was killed.

`engine_for_run` gives a run its engine: ``$DOCKER_HOST``, else the system daemon, else the
private ``dockerd`` (`testbed.backends.docker_engine.DockerEngine`), reused when one answers on
its root, else started — and stopped again when the block ends. With `record`, it writes
``run-engine.json`` (`EngineUse`, atomically, 0600) into the run's home: which engine the run
uses, which process uses it and, when the run started the daemon, that daemon's identity (PID =
process group, kernel start time, engine root as the command-line marker), written as soon as
the daemon is launched, before any container exists.

A run killed by SIGKILL cannot clean up, and no parent-death signal fits ``dockerd``: SIGKILL
would leave its containers running (their shims outlive dockerd and containerd by design) and
SIGTERM stops them but leaves them in the engine's store, where only an answering engine can
remove them, while a ``mqbed down`` may already be using it. So the engine keeps running until
`reap_docker_run` (called by `testbed.backends.run_homes.reap_run_homes` for a home whose
owner is gone) removes the run's containers through it and then stops the daemon the run
started, by its recorded identity — unless it is no longer that process, or another live run
of this testbed home records the same engine, or containers of any other home run on it.
"""

from __future__ import annotations

__all__ = ["RUN_ENGINE", "EngineUse", "engine_for_run", "is_docker_home", "reap_docker_run"]

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.backends.docker_engine import (
    HOME_LABEL,
    DockerEngine,
    shared_engine,
    stop_engine_process,
)
from testbed.backends.procs import ProcessRef, is_alive, start_ticks
from testbed.core.atomic import atomic_write_text
from testbed.exceptions import BackendError

RUN_ENGINE = "run-engine.json"
_DOCKER_STATE = "docker-state.json"  # testbed.backends.docker.STATE_FILE (not imported: heavy)


@dataclass(frozen=True)
class EngineUse:
    """Which engine a run uses (`host`), from which process (`owner`), and the ``dockerd`` it
    started for it (`started`; None when it found one running or used a shared engine)."""

    host: str
    owner: ProcessRef
    root: str | None = None
    started: ProcessRef | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "owner": self.owner.to_json(),
            "root": self.root,
            "started": self.started.to_json() if self.started else None,
        }

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2) + "\n", mode=0o600)

    @classmethod
    def load(cls, path: Path) -> EngineUse | None:
        """The record at `path`; None when there is none or it cannot be read."""
        try:
            data = json.loads(path.read_text())
            started = data.get("started")
            return cls(
                host=str(data["host"]),
                owner=ProcessRef.from_json(data["owner"]),
                root=None if data.get("root") is None else str(data["root"]),
                started=ProcessRef.from_json(started) if started else None,
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def _me() -> ProcessRef:
    pid = os.getpid()
    return ProcessRef(pid, os.getpgid(0), start_ticks(pid) or 0, "")


@contextlib.contextmanager
def engine_for_run(
    root: Path | str | None = None, timeout: float = 60.0, *, record: Path | None = None
) -> Iterator[str]:
    """A Docker API URL for the duration of the block.

    ``$DOCKER_HOST`` if set; else the system daemon if it answers on /var/run/docker.sock;
    else a private `DockerEngine` under `root` (reused if one runs there), stopped afterwards
    if this block started it. With `record` (a file in the run's home), the engine's use is
    recorded there (`EngineUse`) until the block ends, the daemon it starts as soon as it is
    launched.
    """
    me = _me()

    def note(host: str, engine_root: str | None = None, started: ProcessRef | None = None) -> None:
        if record is not None:
            EngineUse(host, me, engine_root, started).save(record)

    engine: DockerEngine | None = None
    try:
        host = shared_engine()
        if host is not None:
            note(host)
        else:
            engine = private = DockerEngine(root)
            host = private.start(
                timeout, on_spawn=lambda ref: note(private.host, str(private.root), ref)
            )
            if not private.owned:
                note(host, str(private.root))
        yield host
    finally:
        if engine is not None:
            engine.stop()
        if record is not None:  # only once the daemon it names is gone
            record.unlink(missing_ok=True)


def is_docker_home(run_dir: Path) -> bool:
    """Whether the run home `run_dir` belongs to a docker-backend run (containers or engine)."""
    return (run_dir / _DOCKER_STATE).exists() or (run_dir / RUN_ENGINE).exists()


def reap_docker_run(run_dir: Path, timeout: float = 30.0) -> bool:
    """Remove the containers of the killed docker-backend run whose home is `run_dir`, then stop
    the ``dockerd`` it started (see the module docstring for when it is left running).

    Only for a home whose owner is gone (`reap_run_homes` decides). Returns whether a daemon
    was stopped; `BackendError` (the home is to be kept, so it can be retried) if the engine
    answers but the containers cannot be removed.
    """
    import docker.errors

    from testbed.backends.docker import DockerBackend

    use = EngineUse.load(run_dir / RUN_ENGINE)
    backend = DockerBackend(run_dir, use.host if use else None)
    try:
        backend.down(timeout=timeout)  # no engine answering: nothing runs, state removed
    except docker.errors.DockerException as exc:
        raise BackendError(
            f"killed run {run_dir.name}: could not remove its containers: {exc}"
        ) from exc
    finally:
        backend.close()
    if use is None or use.started is None or not is_alive(use.started):
        return False  # it started none, or that daemon is gone (or its PID is another's now)
    if _used_elsewhere(use, run_dir):
        return False
    stopped = stop_engine_process(use.started, timeout)
    (run_dir / RUN_ENGINE).unlink(missing_ok=True)
    return stopped


def _used_elsewhere(use: EngineUse, run_dir: Path) -> bool:
    """Whether another live run of this testbed home records the engine `use` names, or
    containers of any other home (or none) run on it (an error listing them: assume so)."""
    for other in run_dir.parent.iterdir():
        theirs = EngineUse.load(other / RUN_ENGINE) if other != run_dir else None
        if theirs and theirs.host == use.host and is_alive(theirs.owner, check_marker=False):
            return True
    engine = DockerEngine(use.root)
    if not engine.running():
        return False  # never answered (killed while it started) or hung: nobody can use it
    import docker

    try:
        client = docker.DockerClient(base_url=engine.host, timeout=30)
        try:
            running = client.containers.list()
        finally:
            client.close()
    except docker.errors.DockerException:
        return True
    mine = str(run_dir.resolve())  # as the containers are labelled (`DockerBackend.home`)
    return any(c.labels.get(HOME_LABEL) != mine for c in running)
