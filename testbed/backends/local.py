"""The local backend: RabbitMQ and ActiveMQ from the OS packages as isolated processes.

Everything of one testbed lives below its `home` (``.mqbed/`` or ``$MQBED_HOME``): node
directories (config, data, logs), the Erlang cookie, and ``state.json`` — the list of processes
this testbed started, which is all `down` needs, from any process. Ports are picked free on
127.0.0.1, Erlang node names and the epmd port are per testbed, so two homes never collide.

Ownership: ``up(detach=True)`` (``mqbed up``) leaves the brokers running until `down`.
``up(detach=False)`` ties them to this Python process: atexit, SIGTERM/SIGHUP (→ SystemExit) and
Ctrl-C (KeyboardInterrupt) stop them gracefully, and ``PR_SET_PDEATHSIG`` makes the kernel
SIGKILL them if this process dies without cleaning up (even by SIGKILL).

`nodes=N` starts N independent (not clustered) brokers of each kind: ``rabbitmq0``,
``rabbitmq1``, ..., ``activemq0``, ...
"""

from __future__ import annotations

__all__ = ["LocalBackend"]

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local_activemq import ActiveMQDriver
from testbed.backends.local_rabbitmq import RabbitMQDriver
from testbed.backends.node_driver import NodeDriver, NotHealthy
from testbed.backends.ports import pick_free_ports
from testbed.backends.state import HomeLock, NodeRecord, TestbedState, testbed_id
from testbed.backends.supervisor import Supervisor
from testbed.exceptions import BackendError, BrokerStartError, ConfigurationError

PORT_CLASH_ATTEMPTS = 3
"""Starts of one node set on fresh ports when a port was taken between picking and binding."""
_CLASH_SIGNS = ("eaddrinuse", "address already in use")


def port_clash(error: str) -> bool:
    """Whether a failed start's message (with its log tail) says a port was already taken:
    Erlang's ``eaddrinuse`` (RabbitMQ's listeners) or Java's "Address already in use"."""
    low = error.lower()
    return any(sign in low for sign in _CLASH_SIGNS)


def _wipe_node_state(node_dir: Path) -> None:
    """Remove what a node wrote (its data and temporary files), keeping its directory."""
    for sub in ("data", "tmp"):
        shutil.rmtree(node_dir / sub, ignore_errors=True)


Kind = Literal["rabbitmq", "activemq"]
_KINDS: tuple[Kind, ...] = ("rabbitmq", "activemq")
_DEFAULT_ACTIVEMQ_MEMORY_MB = 256


class LocalBackend:
    """Native broker processes for the testbed whose directory is `home`."""

    def __init__(self, home: Path | str) -> None:
        self.home = Path(home).expanduser().resolve()
        self.state_path = self.home / "state.json"
        self.startup_seconds: dict[str, float] = {}
        """Seconds from launch to healthy of each node started by this object (last start)."""
        self._lock = HomeLock(self.home)
        self._drivers: dict[str, NodeDriver] = {
            "rabbitmq": RabbitMQDriver(),
            "activemq": ActiveMQDriver(),
        }
        self._procs = Supervisor(self.home, self._drivers)
        self._cleanup_installed = False

    # ----------------------------------------------------------------- public API

    def up(
        self,
        kinds: Sequence[Kind],
        *,
        nodes: int = 1,
        timeout: float = 60.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
    ) -> list[BrokerEndpoint]:
        """Start `nodes` brokers of each kind, wait (≤ `timeout` s) until healthy, record them.

        Kinds already running in this home with the same node count are reused as they are.
        `memory_limit_mb`: ActiveMQ's memoryUsage limit (default 256) and, when given,
        RabbitMQ's absolute memory high watermark (default: RabbitMQ's relative 0.4).
        """
        wanted = self._check_up_args(kinds, nodes, timeout, memory_limit_mb)
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            state = TestbedState.load(self.state_path) or TestbedState(
                testbed_id(self.home), str(self.home)
            )
            reused: list[Kind] = []
            for kind in wanted:
                if self._reusable(state, kind, nodes):
                    reused.append(kind)
            new = [
                self._new_record(state, k, i, detach, memory_limit_mb)
                for k in wanted
                if k not in reused
                for i in range(nodes)
            ]
            if new:
                self._start_new(state, new, timeout=timeout, owned=not detach)
            return [self._endpoint(state, r) for r in state.nodes if r.kind in wanted]

    def down(self, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        """Stop every process the state file lists, remove the state; return the node names.

        Idempotent (``[]`` when nothing is recorded). Node data is deleted unless `keep_data`;
        logs are kept. Raises `BackendError` (state kept, so it can be retried) if a recorded
        process survives SIGKILL.
        """
        if not self.state_path.exists():
            return []
        with self._lock:
            state = TestbedState.load(self.state_path)
            if state is None:
                return []
            try:
                self._procs.terminate(state, state.nodes, timeout)
                self._procs.stop_epmd(state)
            except BackendError as exc:
                raise BackendError(f"down incomplete ({exc}); run it again") from exc
            if not keep_data:
                for rec in state.nodes:
                    _wipe_node_state(Path(rec.node_dir))
            self.state_path.unlink(missing_ok=True)
            return [r.name for r in state.nodes]

    def endpoints(self) -> list[BrokerEndpoint]:
        """Endpoints of every recorded node (stopped or killed ones included), from the state."""
        state = TestbedState.load(self.state_path)
        return [self._endpoint(state, r) for r in state.nodes] if state else []

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        """Graceful stop (SIGTERM; SIGKILL after `timeout` s). The node stays recorded."""
        with self._locked_state() as state:
            self._procs.terminate(state, [state.node(name)], timeout)
            state.save(self.state_path)

    def kill_node(self, name: str) -> None:
        """SIGKILL the node's process group (a crash). The node stays recorded."""
        with self._locked_state() as state:
            self._procs.kill(state.node(name))
            state.save(self.state_path)

    def pause_node(self, name: str) -> None:
        """SIGSTOP the node's process group: its ports still accept, nothing answers."""
        self._procs.signal_node(self._state().node(name), signal.SIGSTOP)

    def resume_node(self, name: str) -> None:
        """SIGCONT the node's process group after `pause_node`."""
        self._procs.signal_node(self._state().node(name), signal.SIGCONT)

    def restart_node(self, name: str, timeout: float = 60.0) -> BrokerEndpoint:
        """Stop the node if it runs, start it again on the same ports, data dir and node name.

        Durable queues and persistent messages survive. Waits ≤ `timeout` s for health.
        """
        with self._locked_state() as state:
            rec = state.node(name)
            self._procs.terminate(state, [rec], 30.0)
            self._start_existing(state, [rec], timeout=timeout, owned=not rec.detached)
            return self._endpoint(state, rec)

    def is_healthy(self, name: str, timeout: float = 2.0) -> bool:
        """Whether the node runs and answers its health probe within `timeout` s."""
        state = self._state()
        rec = state.node(name)
        if not self._procs.running(rec):
            return False
        try:
            self._drivers[rec.kind].probe(rec, timeout)
        except NotHealthy:
            return False
        return True

    def rabbitmqctl(
        self, name: str, *args: str, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl`` against RabbitMQ node `name` with the node's environment."""
        state = self._state()
        rec = state.node(name)
        driver = self._drivers[rec.kind]
        if not isinstance(driver, RabbitMQDriver):
            raise BackendError(f"rabbitmqctl: node {name!r} is {rec.kind}, not rabbitmq")
        return driver.rabbitmqctl(rec, state, args, timeout)

    # ----------------------------------------------------------------- starting

    def _check_up_args(
        self, kinds: Sequence[str], nodes: int, timeout: float, memory_limit_mb: int | None
    ) -> list[Kind]:
        if isinstance(kinds, str):
            kinds = [kinds]
        wanted: list[Kind] = []
        for kind in kinds:
            if kind not in _KINDS:
                raise ConfigurationError(f"broker kind {kind!r} is not one of {list(_KINDS)}")
            if kind not in wanted:
                wanted.append(kind)
        if not wanted:
            raise ConfigurationError("kinds: at least one broker kind is needed, got []")
        if not 1 <= nodes <= 16:
            raise ConfigurationError(f"nodes: must be 1..16, got {nodes!r}")
        if timeout <= 0:
            raise ConfigurationError(f"timeout: must be > 0 seconds, got {timeout!r}")
        if memory_limit_mb is not None and memory_limit_mb < 16:
            raise ConfigurationError(f"memory_limit_mb: must be ≥ 16, got {memory_limit_mb!r}")
        return wanted

    def _reusable(self, state: TestbedState, kind: Kind, nodes: int) -> bool:
        recs = [r for r in state.nodes if r.kind == kind]
        alive = [r for r in recs if self._procs.running(r)]
        if not alive:
            state.nodes = [r for r in state.nodes if r.kind != kind]  # stale records: forget
            return False
        if len(alive) == len(recs) == nodes:
            return True
        raise BackendError(
            f"testbed {self.home}: {len(alive)} of {len(recs)} {kind} node(s) already running "
            f"(asked for {nodes}); run `mqbed down` first"
        )

    def _new_record(
        self, state: TestbedState, kind: Kind, index: int, detach: bool, memory_mb: int | None
    ) -> NodeRecord:
        name = f"{kind}{index}"
        node_dir = self.home / "nodes" / name
        _wipe_node_state(node_dir)  # fresh node: fresh credentials
        node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        params: dict[str, object] = {"memory_limit_mb": memory_mb}
        if kind == "rabbitmq":
            params["erlang_node"] = f"mqbed-{state.testbed_id}-{name}@localhost"
        else:
            mem = memory_mb or _DEFAULT_ACTIVEMQ_MEMORY_MB
            params.update(
                memory_limit_mb=mem,
                heap_mb=max(512, 2 * mem),
                broker_name=f"mqbed-{state.testbed_id}-{name}",
            )
        return NodeRecord(
            name=name,
            kind=kind,
            node_dir=str(node_dir),
            ports={},
            username=f"mqbed-{secrets.token_hex(3)}",
            password=secrets.token_urlsafe(18),
            detached=detach,
            params=params,
        )

    def _start_new(
        self, state: TestbedState, recs: list[NodeRecord], *, timeout: float, owned: bool
    ) -> None:
        """Pick ports and start `recs`. A port is free when picked, not reserved: another
        process (a second testbed starting at the same moment) may bind it before the node
        does, so a start that died of a taken port is retried on fresh ports, at most
        ``PORT_CLASH_ATTEMPTS`` times in all."""
        deadline = time.monotonic() + timeout
        tried: set[int] = set()
        for attempt in range(1, PORT_CLASH_ATTEMPTS + 1):
            if attempt > 1:  # what the failed boot wrote goes, as for any new node
                for rec in recs:
                    _wipe_node_state(Path(rec.node_dir))
            names = [n for r in recs for n in self._drivers[r.kind].port_names]
            exclude = state.used_ports() | tried
            ports = iter(pick_free_ports(len(names), exclude=exclude))
            for rec in recs:
                rec.ports = {n: next(ports) for n in self._drivers[rec.kind].port_names}
                tried.update(rec.ports.values())
            try:
                self._start_once(state, recs, max(1.0, deadline - time.monotonic()), owned)
                return
            except BrokerStartError as e:
                if attempt == PORT_CLASH_ATTEMPTS or not port_clash(str(e)):
                    raise

    def _start_once(
        self, state: TestbedState, recs: list[NodeRecord], timeout: float, owned: bool
    ) -> None:
        state.nodes.extend(recs)
        try:
            self._start_existing(state, recs, timeout=timeout, owned=owned)
        except BaseException:
            state.nodes = [r for r in state.nodes if r not in recs]
            if not any(r.kind == "rabbitmq" for r in state.nodes):
                self._procs.stop_epmd(state)
            if state.nodes or state.epmd:
                state.save(self.state_path)
            else:
                self.state_path.unlink(missing_ok=True)
            raise

    def _start_existing(
        self, state: TestbedState, recs: list[NodeRecord], *, timeout: float, owned: bool
    ) -> None:
        """Launch `recs` (configs rewritten, data kept), wait until all are healthy."""
        if owned:
            self._install_cleanup()
        deadline = time.monotonic() + timeout
        if any(r.kind == "rabbitmq" for r in recs):
            self._procs.ensure_epmd(state, owned=owned)
        launched: dict[str, float] = {}
        try:
            for rec in recs:
                self._drivers[rec.kind].prepare(rec, state)
            for rec in recs:
                launched[rec.name] = time.monotonic()
                self._procs.launch(rec, state, owned=owned)
            state.save(self.state_path)
            with ThreadPoolExecutor(len(recs), thread_name_prefix="mqbed-health") as pool:
                futures = [pool.submit(self._procs.await_healthy, r, deadline) for r in recs]
                errors = [e for e in (f.exception() for f in futures) if e is not None]
            if errors:
                raise errors[0]
        except BaseException:
            self._procs.terminate(state, recs, 10.0, hint=False)
            state.save(self.state_path)
            raise
        for rec, future in zip(recs, futures, strict=True):
            rec.startup_seconds = round(future.result() - launched[rec.name], 3)
            self.startup_seconds[rec.name] = rec.startup_seconds
        state.save(self.state_path)

    # ----------------------------------------------------------------- ownership

    def _install_cleanup(self) -> None:
        if self._cleanup_installed:
            return
        self._cleanup_installed = True
        atexit.register(self._release_owned)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, _exit_on_signal)

    def _release_owned(self) -> None:
        """atexit: stop the nodes this process owns (all of them → a full `down`)."""
        try:
            state = TestbedState.load(self.state_path)
            if state is None:
                return
            mine = [r for r in state.nodes if not r.detached and r.owner_pid == os.getpid()]
            if not mine:
                return
            if len(mine) == len(state.nodes):
                self.down(timeout=15.0)
                return
            with self._lock:
                self._procs.terminate(state, mine, 15.0)
                state.nodes = [r for r in state.nodes if r not in mine]
                state.save(self.state_path)
        except Exception as exc:  # at exit there is nobody left to raise to
            print(f"mqbed: cleanup of {self.home} failed: {exc}", file=sys.stderr)

    # ----------------------------------------------------------------- helpers

    def _state(self) -> TestbedState:
        state = TestbedState.load(self.state_path)
        if state is None:
            raise BackendError(f"no testbed running in {self.home} (no {self.state_path})")
        return state

    @contextlib.contextmanager
    def _locked_state(self) -> Iterator[TestbedState]:
        """The state, read under the home lock (`BackendError` when there is no testbed)."""
        self._state()  # fail before creating a lock file in a home that has no testbed
        with self._lock:
            yield self._state()

    def _endpoint(self, state: TestbedState, rec: NodeRecord) -> BrokerEndpoint:
        return self._drivers[rec.kind].endpoint(rec, state)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
