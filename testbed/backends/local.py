"""The local backend: RabbitMQ and ActiveMQ from the OS packages as isolated processes.

Everything of one testbed lives below its `home` (``.mqbed/`` or ``$MQBED_HOME``): node
directories (config, data, logs), the Erlang cookie, and ``state.json`` — the list of processes
this testbed started, which is all `down` needs, from any process. Ports are picked free on
127.0.0.1, Erlang node names and the epmd port are per testbed, so two homes never collide.

Ownership: ``up(detach=True)`` (``mqbed up``) leaves the brokers running until `down`.
``up(detach=False)`` ties them to this Python process: atexit, SIGTERM/SIGHUP (→ SystemExit) and
Ctrl-C (KeyboardInterrupt) stop them gracefully, and ``PR_SET_PDEATHSIG`` makes the kernel
SIGKILL them if this process dies without cleaning up (even by SIGKILL).
The state file, home lock, data wiping and this cleanup at exit are `OwnedBackend`'s
(`testbed.backends.owned`), shared by the local and docker backends; both implement the
`Backend` contract (`testbed.backends.base`).

`nodes=N` starts N independent (not clustered) brokers of each kind: ``rabbitmq0``,
``rabbitmq1``, ..., ``activemq0``, ...
"""

from __future__ import annotations

__all__ = ["LocalBackend"]

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local_activemq import ActiveMQDriver
from testbed.backends.local_rabbitmq import RabbitMQDriver
from testbed.backends.node_driver import NodeDriver
from testbed.backends.owned import (
    Kind,
    OwnedBackend,
    await_all,
    check_up_args,
    fresh_record,
    node_params,
    wipe_node_state,
)
from testbed.backends.ports import pick_free_ports
from testbed.backends.state import NodeRecord, TestbedState, testbed_id
from testbed.backends.supervisor import Supervisor
from testbed.exceptions import BackendError, BrokerStartError

PORT_CLASH_ATTEMPTS = 3
"""Starts of one node set on fresh ports when a port was taken between picking and binding."""
_CLASH_SIGNS = ("eaddrinuse", "address already in use")


def port_clash(error: str) -> bool:
    """Whether a failed start's message (with its log tail) says a port was already taken:
    Erlang's ``eaddrinuse`` (RabbitMQ's listeners) or Java's "Address already in use"."""
    low = error.lower()
    return any(sign in low for sign in _CLASH_SIGNS)


class LocalBackend(OwnedBackend):
    """Native broker processes for the testbed whose directory is `home`."""

    def __init__(self, home: Path | str) -> None:
        super().__init__(home, "state.json")
        self._drivers: dict[str, NodeDriver] = {
            "rabbitmq": RabbitMQDriver(),
            "activemq": ActiveMQDriver(),
        }
        self._procs = Supervisor(self.home, self._drivers)

    # ----------------------------------------------------------------- public API

    def up(
        self,
        kinds: Sequence[str],
        *,
        nodes: int = 1,
        timeout: float = 60.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
        warm: bool = True,
    ) -> list[BrokerEndpoint]:
        """Start `nodes` brokers of each kind, wait (≤ `timeout` s) until healthy, record them.

        Kinds already running in this home with the same node count are reused as they are.
        `memory_limit_mb`: ActiveMQ's memoryUsage limit (default 256) and, when given,
        RabbitMQ's absolute memory high watermark (default: RabbitMQ's relative 0.4).
        `warm`: warm up each new broker of a kind that needs it before returning
        (`testbed.backends.warm_up`; ``warmed`` says how).
        """
        wanted = check_up_args(kinds, nodes, timeout, memory_limit_mb)
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            state = self._load() or TestbedState(testbed_id(self.home), str(self.home))
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
                if warm:
                    self._warm([self._endpoint(state, r) for r in new])
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
            state = self._load()
            if state is None:
                return []
            try:
                self._procs.terminate(state, state.nodes, timeout)
                self._procs.stop_epmd(state)
            except BackendError as exc:
                raise BackendError(f"down incomplete ({exc}); run it again") from exc
            if not keep_data:
                self._wipe_data(state)
            self.state_path.unlink(missing_ok=True)
            return [r.name for r in state.nodes]

    def endpoints(self) -> list[BrokerEndpoint]:
        """Endpoints of every recorded node (stopped or killed ones included), from the state."""
        state = self._load()
        return [self._endpoint(state, r) for r in state.nodes] if state else []

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        """Graceful stop (SIGTERM; SIGKILL after `timeout` s). The node stays recorded."""
        with self._locked_state() as state:
            self._procs.terminate(state, [state.node(name)], timeout)
            state.save(self.state_path)

    def kill_node(self, name: str) -> float | None:
        """SIGKILL the node's process group (a crash). The node stays recorded. Returns the
        seconds from the signal until the process was gone (None: it was not running)."""
        with self._locked_state() as state:
            took = self._procs.kill(state.node(name))
            state.save(self.state_path)
        return took

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

    # ----------------------------------------------------------------- owned-node hooks

    def _running(self, rec: NodeRecord) -> bool:
        return self._procs.running(rec)

    def _probe(self, rec: NodeRecord, timeout: float) -> None:
        self._drivers[rec.kind].probe(rec, timeout)

    def _release(self, state: TestbedState, recs: list[NodeRecord]) -> None:
        self._procs.terminate(state, recs, 15.0)

    # ----------------------------------------------------------------- starting

    def _new_record(
        self, state: TestbedState, kind: Kind, index: int, detach: bool, memory_mb: int | None
    ) -> NodeRecord:
        name = f"{kind}{index}"
        node_dir = self.home / "nodes" / name
        wipe_node_state(node_dir)  # fresh node: fresh credentials
        node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        params = node_params(kind, state.testbed_id, name, memory_mb)
        return fresh_record(name, kind, node_dir, detach=detach, params=params)

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
                    wipe_node_state(Path(rec.node_dir))
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
            if not any(r.kind == "rabbitmq" for r in state.nodes if r not in recs):
                self._procs.stop_epmd(state)
            self._forget(state, recs)
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
            healthy = await_all(lambda r: self._procs.await_healthy(r, deadline), recs)
        except BaseException:
            self._procs.terminate(state, recs, 10.0, hint=False)
            state.save(self.state_path)
            raise
        for rec, at in zip(recs, healthy, strict=True):
            self._record_startup(rec, at - launched[rec.name])
        state.save(self.state_path)

    # ----------------------------------------------------------------- helpers

    def _endpoint(self, state: TestbedState, rec: NodeRecord) -> BrokerEndpoint:
        return self._drivers[rec.kind].endpoint(rec, state)
