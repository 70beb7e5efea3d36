"""Per-run homes ``HOME/runs/<run_id>/``: what a live run keeps outside its run directory.

A run's home holds its state entry (``run.json``: the `mqbed run` process and the Locust
processes it started), the 0600 broker-credentials files of its Locust processes and, when the
run starts its own broker, that broker's testbed (``state.json``, node data, logs). `run_home`
creates it when the run starts and removes it when the run ends — also on errors and signals.

A run killed by SIGKILL cannot clean up: the kernel kills its brokers and Locust processes
(``PR_SET_PDEATHSIG``), but the home stays. `reap_run_homes` (``mqbed down``) finds the homes
whose `mqbed run` process is gone, stops every process their entries still name (identity
checked by start time and command line, never by name), stops a broker testbed left in them
and removes them. Homes of runs still on are left alone, and so are homes whose owner cannot be
told (no ``run.json``, no ``state.json``) and homes of the docker backend.
"""

from __future__ import annotations

__all__ = ["RunHome", "reap_run_homes", "run_home"]

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

from testbed.backends.procs import ProcessRef, is_alive, signal_group, start_ticks, wait_gone
from testbed.backends.state import RUN_RECORD, RunRecord, TestbedState
from testbed.exceptions import MqbedError

RUNS = "runs"
_DOCKER_STATE = "docker-state.json"  # testbed.backends.docker.STATE_FILE (not imported: heavy)


class RunHome:
    """The home of one live run (created by `run_home`)."""

    def __init__(self, home: Path, run_id: str) -> None:
        self.dir = Path(home) / RUNS / run_id
        me = os.getpid()
        self.record = RunRecord(run_id, ProcessRef(me, os.getpgid(0), start_ticks(me) or 0, ""))

    def secrets_path(self, rep: int) -> Path:
        """Where replication `rep`'s Locust processes find the broker credentials (0600)."""
        return self.dir / f"worker-secrets.r{rep}.json"

    def track(self, refs: Sequence[ProcessRef]) -> None:
        """Add `refs` to the run's state entry (before anything could orphan them)."""
        self.record.processes.extend(refs)
        self.record.save(self.dir / RUN_RECORD)


@contextlib.contextmanager
def run_home(home: Path, run_id: str) -> Iterator[RunHome]:
    """The run's home with its state entry, removed (with everything in it) at the end."""
    entry = RunHome(home, run_id)
    entry.dir.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    entry.dir.mkdir(mode=0o700)
    try:
        entry.record.save(entry.dir / RUN_RECORD)
        yield entry
    finally:
        shutil.rmtree(entry.dir, ignore_errors=True)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_gone(run_dir: Path) -> bool:
    """Whether the `mqbed run` process of `run_dir` is known to be gone."""
    rec = RunRecord.load(run_dir / RUN_RECORD)
    if rec is not None:
        return not is_alive(rec.owner, check_marker=False)
    try:
        state = TestbedState.load(run_dir / "state.json")
    except MqbedError:
        return False
    if state is None:
        return False  # not a run home we can tell the owner of: leave it
    owners = {n.owner_pid for n in state.nodes if n.owner_pid}
    return bool(owners) and not any(_pid_exists(pid) for pid in owners)


def reap_run_homes(home: Path, timeout: float = 30.0) -> list[str]:
    """Stop and remove what killed runs left in ``home/runs/``; return the run ids removed.

    `MqbedError` (the home kept, so it can be retried) if a broker left there does not stop.
    """
    from testbed.backends.local import LocalBackend

    runs = Path(home) / RUNS
    removed: list[str] = []
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not run_dir.is_dir() or not _owner_gone(run_dir):
            continue
        rec = RunRecord.load(run_dir / RUN_RECORD)
        left = rec.processes if rec else []
        for ref in left:
            signal_group(ref, signal.SIGKILL)  # only if still the process the run started
        wait_gone(left, 10.0)
        if (run_dir / _DOCKER_STATE).exists():
            continue  # containers: `mqbed down --home` on that directory stops them
        if (run_dir / "state.json").exists():
            LocalBackend(run_dir).down(timeout=timeout)
        shutil.rmtree(run_dir, ignore_errors=True)
        removed.append(run_dir.name)
    return removed
