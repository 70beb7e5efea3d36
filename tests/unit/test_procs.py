"""The process table of the local backend (testbed/backends/procs.py, psutil underneath): the
start-time identity of a process, its state, its descendants and its process group."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.backends.procs import (
    ProcessRef,
    cmdline,
    descendants,
    group_members,
    is_alive,
    is_paused,
    start_ticks,
)

# A leader that starts a child in its own group and a grandchild that leaves it with setsid().
TREE = """
import subprocess, sys, time
child = subprocess.Popen(["sleep", "60"])
grand = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)
print(child.pid, grand.pid, flush=True)
time.sleep(60)
"""


def _stat_state(pid: int) -> str:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rfind(")") + 2 :].split()[0]


def _until(cond: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "mqbed-marker"],
        start_new_session=True,
    )
    # until the child has exec'd python, /proc/<pid>/cmdline is still the parent's (pytest's):
    # a marker check done before that would see a stranger (seen on a busy machine)
    assert _until(lambda: cmdline(proc.pid).endswith("mqbed-marker")), cmdline(proc.pid)
    yield proc
    proc.kill()
    proc.wait(5)


def test_start_ticks_is_the_kernel_field(sleeper: subprocess.Popen[bytes]) -> None:
    raw = Path(f"/proc/{sleeper.pid}/stat").read_text()
    assert start_ticks(sleeper.pid) == int(raw.split()[21])  # no space in "python3"
    assert start_ticks(sleeper.pid) != start_ticks(os.getpid())
    assert start_ticks(2**22 + 1) is None  # above any pid_max: never exists


def test_identity_needs_start_time_and_marker(sleeper: subprocess.Popen[bytes]) -> None:
    ref = ProcessRef.of(sleeper.pid, "mqbed-marker")
    assert ref.pgid == sleeper.pid and is_alive(ref)
    recycled = ProcessRef(ref.pid, ref.pgid, ref.start_ticks + 1, ref.marker)
    assert not is_alive(recycled) and not is_alive(recycled, check_marker=False)
    stranger = ProcessRef(ref.pid, ref.pgid, ref.start_ticks, "another-home")
    assert not is_alive(stranger) and is_alive(stranger, check_marker=False)
    assert cmdline(sleeper.pid) == f"{sys.executable} -c import time; time.sleep(60) mqbed-marker"


def test_a_zombie_is_not_alive_and_has_no_cmdline() -> None:
    proc = subprocess.Popen(["true"])
    assert _until(lambda: _stat_state(proc.pid) == "Z")  # exited, not yet reaped
    assert cmdline(proc.pid) == ""
    assert group_members(os.getpgid(0)).count(proc.pid) == 0
    ref = ProcessRef(proc.pid, proc.pid, start_ticks(proc.pid) or 0, "")
    assert not is_alive(ref, check_marker=False)  # (and is_alive reaped it)
    assert not Path(f"/proc/{proc.pid}").exists() or _stat_state(proc.pid) != "Z"


def test_paused_is_the_stopped_state(sleeper: subprocess.Popen[bytes]) -> None:
    assert not is_paused(sleeper.pid)
    os.kill(sleeper.pid, signal.SIGSTOP)
    assert _until(lambda: is_paused(sleeper.pid))
    os.kill(sleeper.pid, signal.SIGCONT)
    assert _until(lambda: not is_paused(sleeper.pid))
    assert not is_paused(2**22 + 1)


def test_descendants_follow_parents_and_groups_follow_pgid() -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, start_new_session=True
    )
    grand = 0
    try:
        assert leader.stdout is not None
        child, grand = (int(x) for x in leader.stdout.readline().split())
        found = {ref.pid: ref for ref in descendants(leader.pid)}
        assert set(found) == {child, grand}  # the setsid() grandchild too
        assert found[child].pgid == leader.pid and found[grand].pgid == grand
        assert found[child].start_ticks == start_ticks(child)
        assert sorted(group_members(leader.pid)) == sorted([leader.pid, child])
        assert group_members(grand) == [grand]
        os.kill(grand, signal.SIGKILL)  # a zombie of the leader's: no longer a descendant
        assert _until(lambda: grand not in {r.pid for r in descendants(leader.pid)})
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        if grand:
            with contextlib.suppress(ProcessLookupError):
                os.kill(grand, signal.SIGKILL)
        leader.wait(5)
    assert descendants(leader.pid) == []  # the leader is gone
