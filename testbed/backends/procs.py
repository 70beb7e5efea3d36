"""Processes the local backend starts: identity checks, signalling, waiting, spawning.

A process is identified by ``(pid, start_ticks)`` — the kernel start time (field 22 of
``/proc/PID/stat``) makes a recycled PID distinguishable — plus a *marker* string that must occur
in its command line (the testbed home). Nothing here ever looks processes up by name. The
process table (states, command lines, children, the walk for a process group) is psutil's;
only the start time is read by hand (see `start_ticks`).
"""

from __future__ import annotations

__all__ = [
    "ProcessRef",
    "Spawner",
    "cmdline",
    "descendants",
    "group_members",
    "is_alive",
    "is_paused",
    "reap",
    "signal_group",
    "signal_process",
    "start_ticks",
    "wait_gone",
]

import contextlib
import ctypes
import functools
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from testbed.exceptions import BackendError

_PR_SET_PDEATHSIG = 1
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


@dataclass(frozen=True)
class ProcessRef:
    """A process mqbed started: PID, process group, kernel start time and cmdline marker."""

    pid: int
    pgid: int
    start_ticks: int
    marker: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, pid: int, marker: str) -> ProcessRef:
        """The process `pid` just started as the leader of its own session/process group."""
        return cls(pid, pid, start_ticks(pid) or 0, marker)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRef:
        return cls(
            pid=int(data["pid"]),
            pgid=int(data["pgid"]),
            start_ticks=int(data["start_ticks"]),
            marker=str(data["marker"]),
        )


def start_ticks(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks since boot, or None if it does not exist.

    Read from ``/proc/PID/stat`` by hand on purpose: it is the identity stored in state files,
    and psutil exposes it only as ``create_time()``, a float of seconds since the epoch derived
    from the boot time — an exact integer compare is what tells a recycled PID apart.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Fields after "(comm)", which may itself hold spaces and parentheses: starttime is the
    # 22nd field of the line, the 20th after the command name.
    return int(raw[raw.rfind(")") + 2 :].split()[19])


def _live(proc: psutil.Process) -> bool:
    """Whether `proc` exists and is not a zombie (or dead)."""
    try:
        return proc.status() not in _GONE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone in the meantime
        return None


def cmdline(pid: int) -> str:
    """The command line of `pid` joined by spaces ('' if gone, a zombie or unreadable)."""
    try:
        return " ".join(psutil.Process(pid).cmdline()).strip()
    except psutil.Error:
        return ""


def reap(pid: int) -> None:
    """Collect `pid`'s exit status if it is our child and has exited (no-op otherwise)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_alive(ref: ProcessRef, *, check_marker: bool = True) -> bool:
    """True while the process `ref` names still runs (same start time, not a zombie).

    With `check_marker`, its command line must also contain ``ref.marker``.
    """
    reap(ref.pid)
    try:
        proc = psutil.Process(ref.pid)
    except psutil.Error:
        return False
    if not _live(proc) or start_ticks(ref.pid) != ref.start_ticks:
        return False
    return not check_marker or ref.marker in cmdline(ref.pid)


def is_paused(pid: int) -> bool:
    """Whether `pid` is stopped by a signal (SIGSTOP/SIGTSTP): state T in /proc/PID/stat."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def descendants(pid: int) -> list[ProcessRef]:
    """Every live descendant of `pid` (children that setsid() themselves included)."""
    try:
        children = psutil.Process(pid).children(recursive=True)  # by parent PID, not by group
    except psutil.Error:
        return []
    found: list[ProcessRef] = []
    for child in children:
        pgid, ticks = _pgid(child.pid), start_ticks(child.pid)
        if pgid is not None and ticks is not None and _live(child):
            found.append(ProcessRef(child.pid, pgid, ticks, ""))
    return found


def group_members(pgid: int) -> list[int]:
    """PIDs of live (non-zombie) processes in process group `pgid`."""
    return [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid and _live(p)]


def signal_process(ref: ProcessRef, sig: int, *, check_marker: bool = True) -> bool:
    """Send `sig` to `ref` if it is still the process we started. Returns whether it was sent."""
    if not is_alive(ref, check_marker=check_marker):
        return False
    try:
        os.kill(ref.pid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_group(ref: ProcessRef, sig: int) -> bool:
    """Send `sig` to the process group of `ref` — only while its leader is verifiably ours.

    A live leader guarantees the group id was not recycled. Returns whether it was sent.
    """
    if not is_alive(ref):
        return False
    try:
        os.killpg(ref.pgid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(
    refs: Sequence[ProcessRef], timeout: float, *, poll: float = 0.05
) -> list[ProcessRef]:
    """Wait until none of `refs` is alive or `timeout` passes; return those still alive."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [r for r in refs if is_alive(r, check_marker=False)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(poll)


# Resolved once, here: the forked child must not dlopen() (another thread may hold the loader
# lock at fork time); it only calls this function pointer.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _set_pdeathsig(parent: int) -> None:  # runs in the forked child, before exec
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect: nobody to serve
        os._exit(1)


class Spawner:
    """Starts broker and Locust processes, each in a new session (its process group its own).

    ``owned=True`` children get ``PR_SET_PDEATHSIG=SIGKILL``: if the Python process dies, even
    by SIGKILL, the kernel kills them. Linux sends that signal when the *thread* that forked the
    child exits, so owned children are forked from one long-lived daemon thread, never from a
    caller's (possibly short-lived) thread. A child whose parent died before the ``prctl`` took
    effect (it would never get the signal) exits at once instead of running orphaned.
    """

    _lock = threading.Lock()
    _requests: queue.Queue[tuple[dict[str, Any], queue.Queue[Any]]] | None = None

    @classmethod
    def _owner_queue(cls) -> queue.Queue[tuple[dict[str, Any], queue.Queue[Any]]]:
        with cls._lock:
            if cls._requests is None:
                requests: queue.Queue[tuple[dict[str, Any], queue.Queue[Any]]] = queue.Queue()
                threading.Thread(
                    target=cls._serve, args=(requests,), name="mqbed-spawner", daemon=True
                ).start()
                cls._requests = requests
            return cls._requests

    @staticmethod
    def _serve(requests: queue.Queue[tuple[dict[str, Any], queue.Queue[Any]]]) -> None:
        while True:
            kwargs, reply = requests.get()
            try:
                reply.put(subprocess.Popen(**kwargs))
            except BaseException as exc:  # handed back to the caller, re-raised there
                reply.put(exc)

    @classmethod
    def _forget_thread(cls) -> None:
        """After fork() the child has no spawner thread: let it start its own."""
        cls._requests = None
        cls._lock = threading.Lock()

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log: IO[bytes],
        owned: bool,
        executable: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` detached from our terminal, stdout+stderr appended to `log`."""
        kwargs: dict[str, Any] = {
            "args": list(argv),
            "executable": executable,
            "env": dict(env),
            "cwd": str(cwd),
            "stdin": subprocess.DEVNULL,
            "stdout": log,
            "stderr": subprocess.STDOUT,
            "start_new_session": True,
            "close_fds": True,
        }
        if not owned:
            return subprocess.Popen(**kwargs)
        kwargs["preexec_fn"] = functools.partial(_set_pdeathsig, os.getpid())
        reply: queue.Queue[Any] = queue.Queue()
        cls._owner_queue().put((kwargs, reply))
        try:
            result = reply.get(timeout=30)
        except queue.Empty:
            raise BackendError(f"spawner thread did not start {argv[0]} within 30 s") from None
        if isinstance(result, BaseException):
            raise result
        proc: subprocess.Popen[bytes] = result
        return proc


os.register_at_fork(after_in_child=Spawner._forget_thread)
