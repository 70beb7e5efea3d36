"""Per-run homes ``HOME/runs/<run_id>/``: what a live run keeps outside its run directory.

A run's home holds its state entry (``run.json``: the `mqbed run` process and the Locust
processes it started), the 0600 broker-credentials files of its Locust processes and, when the
run starts its own broker, that broker's testbed (``state.json``, node data, logs). `run_home`
creates it when the run starts and removes it when the run ends — also on errors and signals.

A run killed by SIGKILL cannot clean up: the kernel kills its brokers and Locust processes
(``PR_SET_PDEATHSIG``), but the home stays. On the docker backend its broker containers and the
private ``dockerd`` it started (recorded in the home's ``run-engine.json``) stay as well.
`reap_run_homes` (``mqbed down``, and every run before it starts) finds the homes whose `mqbed
run` process is gone, stops every process their entries still name (identity checked by start
time and command line, never by name), removes a docker run's containers and stops the
``dockerd`` it started (`testbed.backends.run_engine.reap_docker_run`), stops a local broker
testbed left in them and removes them. Homes of runs still on are left alone, and so are homes
whose owner cannot be told (no ``run.json``, ``run-engine.json`` or state file naming it).
"""

from __future__ import annotations

__all__ = ["RunHome", "reap_before_run", "reap_run_homes", "run_home"]

import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from testbed.backends.procs import ProcessRef, is_alive, signal_group, start_ticks, wait_gone
from testbed.backends.run_engine import RUN_ENGINE, EngineUse, is_docker_home, reap_docker_run
from testbed.backends.state import RUN_RECORD, RunRecord, TestbedState
from testbed.exceptions import MqbedError

RUNS = "runs"
_STATES = ("state.json", "docker-state.json")  # local and docker (`docker.STATE_FILE`) testbeds


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
    """Whether the `mqbed run` process of `run_dir` is known to be gone: the owner its
    ``run.json`` names, else the one its ``run-engine.json`` names, else the owner PIDs of the
    nodes its state files record (a home nothing of which names an owner: never)."""
    rec = RunRecord.load(run_dir / RUN_RECORD)
    use = EngineUse.load(run_dir / RUN_ENGINE)
    owner = rec.owner if rec is not None else use.owner if use is not None else None
    if owner is not None:
        return not is_alive(owner, check_marker=False)
    owners: set[int] = set()
    for name in _STATES:
        try:
            state = TestbedState.load(run_dir / name)
        except MqbedError:
            return False
        owners |= {n.owner_pid for n in state.nodes if n.owner_pid} if state else set()
    return bool(owners) and not any(_pid_exists(pid) for pid in owners)


def reap_run_homes(home: Path, timeout: float = 30.0) -> list[str]:
    """Stop and remove what killed runs left in ``home/runs/``; return the run ids removed.

    `MqbedError` (the home kept, so it can be retried) if a broker left there does not stop,
    or a docker run's containers cannot be removed.
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
        if is_docker_home(run_dir):  # its containers, then the dockerd it started
            reap_docker_run(run_dir, timeout=timeout)
        if (run_dir / "state.json").exists():
            LocalBackend(run_dir).down(timeout=timeout)
        shutil.rmtree(run_dir, ignore_errors=True)
        removed.append(run_dir.name)
    return removed


def reap_before_run(home: Path, say: Callable[[str], None]) -> None:
    """`reap_run_homes` as a run starts in `home`: what killed runs left goes first (said with
    `say`); a failure is only said — the new run does not need it, and ``mqbed down`` retries."""
    try:
        reaped = reap_run_homes(home)
    except MqbedError as exc:
        say(f"could not clean up after a killed run ({exc}); `mqbed down` retries")
        return
    if reaped:
        say(f"cleaned up after killed run(s): {', '.join(reaped)}")
