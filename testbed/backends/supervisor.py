"""Starts, watches and stops the processes of one local testbed (nodes and its epmd).

The `Supervisor` keeps the `Popen` handles of the children it started (to reap them) but never
relies on them: every decision goes through ``(pid, start time, cmdline marker)`` identities, so
a fresh process that only read the state file can stop what another process started.
"""

from __future__ import annotations

__all__ = ["Supervisor"]

import contextlib
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from testbed.backends.local_rabbitmq import epmd_command
from testbed.backends.node_driver import NodeDriver, NotHealthy, clean_env, log_tail
from testbed.backends.ports import pick_free_ports, wait_port_open
from testbed.backends.procs import (
    ProcessRef,
    Spawner,
    descendants,
    is_alive,
    is_paused,
    signal_group,
    signal_process,
    start_ticks,
    wait_gone,
)
from testbed.backends.state import NodeRecord, TestbedState
from testbed.exceptions import BackendError, BrokerStartError


class Supervisor:
    """Process lifecycle for the testbed in `home`; `drivers` maps broker kind → driver."""

    def __init__(self, home: Path, drivers: Mapping[str, NodeDriver]) -> None:
        self.home = home
        self.drivers = drivers
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def alive(self, ref: ProcessRef | None) -> bool:
        """Whether `ref` still runs as the process we started (zombies count as dead)."""
        if ref is None:
            return False
        child = self._children.get(ref.pid)
        if child is not None:
            # Our own child: its pid cannot be reused before we reap it, so poll() is exact. The
            # identity check below is not, at one moment: while a launcher script execs the
            # next program of its chain, /proc/PID/cmdline can read empty, and a node polled
            # right after its launch was taken for dead (a full make test: "exited before
            # becoming healthy" for a RabbitMQ that went on to start).
            return child.poll() is None
        return is_alive(ref)

    def running(self, rec: NodeRecord) -> bool:
        return self.alive(rec.process)

    # ----------------------------------------------------------------- start

    def launch(self, rec: NodeRecord, state: TestbedState, *, owned: bool) -> None:
        """Start `rec`'s broker in its own session; record its identity in `rec.process`."""
        driver = self.drivers[rec.kind]
        argv, env = driver.command(rec, state)
        node_dir = Path(rec.node_dir)
        with open(node_dir / "console.log", "ab") as log:
            log.write(f"\n=== mqbed: starting {rec.name} at {time.ctime()} ===\n".encode())
            log.flush()
            proc = Spawner.spawn(argv, env=env, cwd=node_dir, log=log, owned=owned)
        self._children[proc.pid] = proc
        ticks = start_ticks(proc.pid) or 0
        rec.process = ProcessRef(proc.pid, proc.pid, ticks, driver.marker(state))
        rec.owner_pid = os.getpid() if owned else None

    def await_healthy(self, rec: NodeRecord, deadline: float) -> float:
        """Poll `rec` until its probe passes (→ the monotonic time it did) or fail clearly.

        Raises `BrokerStartError` with the tail of the node's logs if the process exits or
        the probe still fails at `deadline`.
        """
        driver = self.drivers[rec.kind]
        last = "not probed yet"
        while True:
            if not self.running(rec):
                raise BrokerStartError(
                    f"{rec.kind} node {rec.name} exited before becoming healthy; "
                    f"logs in {rec.node_dir}\n{log_tail(driver.log_files(rec))}"
                )
            remaining = deadline - time.monotonic()
            try:
                rec.version = driver.probe(rec, timeout=max(0.2, min(2.0, remaining)))
                return time.monotonic()
            except NotHealthy as exc:
                last = str(exc)
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"{rec.kind} node {rec.name} not healthy within the timeout ({last}); "
                    f"logs in {rec.node_dir}\n{log_tail(driver.log_files(rec))}"
                )
            time.sleep(0.1)

    def ensure_epmd(self, state: TestbedState, *, owned: bool) -> None:
        """Start the testbed's own epmd (same port as before, if it had one) unless it runs."""
        if self.alive(state.epmd):
            return
        if state.epmd_port is None:
            state.epmd_port = pick_free_ports(1, exclude=state.used_ports())[0]
        exe, argv = epmd_command(self.home, state.epmd_port)
        log_path = self.home / "epmd.log"
        with open(log_path, "ab") as log:
            proc = Spawner.spawn(
                argv, executable=exe, env=clean_env({}), cwd=self.home, log=log, owned=owned
            )
        self._children[proc.pid] = proc
        state.epmd = ProcessRef(proc.pid, proc.pid, start_ticks(proc.pid) or 0, str(self.home))
        state.epmd_detached = not owned
        if not wait_port_open(state.epmd_port, 10.0):
            self.stop_epmd(state)
            raise BrokerStartError(
                f"epmd did not listen on 127.0.0.1:{state.epmd_port} within 10 s\n"
                f"{log_tail([log_path])}"
            )

    # ----------------------------------------------------------------- stop

    def terminate(
        self, state: TestbedState, recs: Sequence[NodeRecord], timeout: float, *, hint: bool = True
    ) -> None:
        """SIGTERM (+SIGCONT) every live node at once; SIGKILL those alive after `timeout` s.

        With `hint`, each running (not paused) node's driver first gets `before_stop`.
        """
        running = [r for r in recs if r.process and self.alive(r.process)]
        live = [r.process for r in running if r.process]
        helpers = [h for ref in live for h in descendants(ref.pid)]
        hinted = [r for r in running if hint and r.process and not is_paused(r.process.pid)]
        _each_in_thread(
            [functools.partial(self.drivers[r.kind].before_stop, r, state) for r in hinted]
        )
        for ref in live:
            signal_process(ref, signal.SIGTERM)
            signal_group(ref, signal.SIGCONT)  # a paused node must run to handle SIGTERM
        stubborn = wait_gone(live, timeout)
        for ref in stubborn:
            signal_group(ref, signal.SIGKILL)
        self._await_gone(live, 10.0, "after SIGTERM/SIGKILL")
        self._finish_helpers(helpers)

    def kill(self, rec: NodeRecord) -> float | None:
        """SIGKILL `rec`'s whole process group and wait until it is gone: the seconds from
        the signal until the process was (None: it was not running)."""
        if not (rec.process and self.alive(rec.process)):
            return None
        helpers = descendants(rec.process.pid)
        signalled = time.monotonic()
        signal_group(rec.process, signal.SIGKILL)
        self._await_gone([rec.process], 10.0, "after SIGKILL")
        took = time.monotonic() - signalled
        self._finish_helpers(helpers)
        return took

    def signal_node(self, rec: NodeRecord, sig: int) -> None:
        """Send `sig` to `rec`'s process group; `BackendError` if the node is not running."""
        if not (rec.process and self.alive(rec.process) and signal_group(rec.process, sig)):
            raise BackendError(f"node {rec.name!r} of testbed {self.home} is not running")

    def stop_epmd(self, state: TestbedState) -> None:
        if state.epmd and self.alive(state.epmd):
            signal_process(state.epmd, signal.SIGTERM)
            if wait_gone([state.epmd], 3.0):
                signal_group(state.epmd, signal.SIGKILL)
            self._await_gone([state.epmd], 5.0, "epmd after SIGTERM/SIGKILL")
        state.epmd = None

    def _finish_helpers(self, helpers: Sequence[ProcessRef]) -> None:
        """Erlang helpers (erl_child_setup, inet_gethost) leave by themselves; make sure."""
        for ref in wait_gone(helpers, 3.0):
            signal_process(ref, signal.SIGKILL, check_marker=False)
        wait_gone(helpers, 2.0)

    def _await_gone(self, refs: Sequence[ProcessRef], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        for ref in refs:
            child = self._children.pop(ref.pid, None)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(max(0.0, deadline - time.monotonic()))
        survivors = wait_gone(refs, max(0.0, deadline - time.monotonic()))
        if survivors:
            pids = [r.pid for r in survivors]
            raise BackendError(f"testbed {self.home}: PIDs {pids} still running {what}")


def _each_in_thread(calls: Sequence[Callable[[], None]]) -> None:
    """Run `calls` concurrently (sequentially if threads cannot start, e.g. during exit)."""
    threads = [threading.Thread(target=call, name="mqbed-stop", daemon=True) for call in calls]
    try:
        for thread in threads:
            thread.start()
    except RuntimeError:
        for call, thread in zip(calls, threads, strict=True):
            if not thread.is_alive() and thread.ident is None:
                call()
    for thread in threads:
        if thread.ident is not None:
            thread.join()
