"""Processes of a run: the parent-death signal (with its re-check of the parent), the run's state
entry that `mqbed down` reads to stop what a killed run left, and the signal handling that
turns SIGINT/SIGTERM/SIGHUP into one clean stop with the shells' exit codes."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.backends.procs import ProcessRef, _set_pdeathsig, is_alive
from testbed.backends.run_homes import reap_run_homes, run_home
from testbed.backends.state import RUN_RECORD, RunRecord
from testbed.interrupts import EXIT_CODES, RunInterrupted, interruptible

ROOT = Path(__file__).resolve().parents[2]

MIDDLE = """
import sys, time
from pathlib import Path
from testbed.backends.procs import Spawner
with open(sys.argv[1], "ab") as log:
    p = Spawner.spawn(["sleep", "60"], env={}, cwd=Path("."), log=log, owned=True)
print(p.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_owned_child_dies_with_a_sigkilled_parent(tmp_path: Path) -> None:
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, str(tmp_path / "log")],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert middle.stdout is not None
        child = int(middle.stdout.readline())
        assert not _gone(child, 0.3)
    finally:
        middle.kill()
        middle.wait(10)
    assert _gone(child, 5.0)


def test_child_exits_when_its_parent_is_already_gone() -> None:
    """The re-check after PR_SET_PDEATHSIG: a child whose parent is not the expected one (here:
    a PID that is not its parent, as after the parent's death) exits instead of running on."""
    wrong_parent = functools.partial(_set_pdeathsig, 1)
    proc = subprocess.Popen(["sleep", "30"], preexec_fn=wrong_parent)  # noqa: PLW1509
    try:
        assert proc.wait(timeout=5) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def _dead_ref() -> ProcessRef:
    """The identity of a process that has exited (a killed `mqbed run`)."""
    p = subprocess.Popen(["true"])
    ref = ProcessRef.of(p.pid, "")
    p.wait(5)
    return ref


def test_down_stops_what_a_killed_run_left_and_keeps_live_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    orphan = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        dead = home / "runs" / "killed"
        dead.mkdir(parents=True)
        (dead / "worker-secrets.r0.json").write_text("{}")
        left = ProcessRef.of(orphan.pid, "sleep")
        RunRecord("killed", _dead_ref(), [left]).save(dead / RUN_RECORD)
        with run_home(home, "on") as entry:  # a live run: this process owns it
            entry.track([ProcessRef.of(os.getpid(), "")])
            assert json.loads((entry.dir / RUN_RECORD).read_text())["processes"]
            (home / "runs" / "unknown").mkdir()  # nothing tells whose it is: left alone
            assert reap_run_homes(home) == ["killed"]
            assert not is_alive(left)  # (procs reaped it: it was our child)
            orphan.wait(timeout=10)
            assert sorted(p.name for p in (home / "runs").iterdir()) == ["on", "unknown"]
        assert sorted(p.name for p in (home / "runs").iterdir()) == ["unknown"]
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(5)


def test_down_never_signals_a_recycled_pid(tmp_path: Path) -> None:
    """A recorded PID now used by another process (other start time) is not touched."""
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ref = ProcessRef.of(bystander.pid, "sleep")
        recycled = ProcessRef(ref.pid, ref.pgid, ref.start_ticks - 1, ref.marker)
        run = tmp_path / "runs" / "old"
        run.mkdir(parents=True)
        RunRecord("old", _dead_ref(), [recycled]).save(run / RUN_RECORD)
        assert reap_run_homes(tmp_path) == ["old"]
        assert is_alive(ref)
    finally:
        bystander.kill()
        bystander.wait(5)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_stop_the_run_with_the_shell_exit_code(sig: signal.Signals) -> None:
    before = signal.getsignal(signal.SIGTERM)
    order: list[str] = []
    with (  # noqa: PT012
        pytest.raises((KeyboardInterrupt, RunInterrupted)) as caught,
        interruptible() as interrupts,
    ):
        with interrupts.shielded():  # cleanup: the signal waits until it is done
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
            order.append("cleanup done")
            os.kill(os.getpid(), signal.SIGTERM)  # a second signal is ignored
        order.append("not reached")
    assert order == ["cleanup done"]
    expected = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}[sig]
    assert EXIT_CODES[sig] == expected
    if sig == signal.SIGINT:
        assert caught.type is KeyboardInterrupt  # the CLI exits 130 on it
    else:
        assert isinstance(caught.value, RunInterrupted) and caught.value.code == expected
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored
