"""The docker backend: RabbitMQ and ActiveMQ as containers, driven through the Docker SDK.

The same lifecycle as the local backend (`LocalBackend`), with containers instead of processes:
everything of one testbed lives below `home` — node directories (config rendered from
``deploy/<kind>``, data, logs; bind-mounted into the containers) and ``docker-state.json``
(which containers this testbed created, on which engine, ports and generated credentials),
which is all `down` needs, from any process. Containers use **host networking only**: every
port is a free 127.0.0.1 port picked on the host; nothing ever talks to a container address.

Images are the offline ones (``mqbed/rabbitmq``, ``mqbed/activemq``), built from Debian
packages on first use (`testbed.backends.images`, a few minutes once per machine).

Faults act on containers: `kill_node` (SIGKILL, the container exits), `pause_node` /
`resume_node` (cgroup freezer: ports still accept, nothing answers), `stop_node`,
`restart_node` (same ports, data and node name: durable queues and persistent messages
survive).

Ownership: ``up(detach=True)`` leaves containers running until `down`; ``up(detach=False)``
removes them at exit of this process (atexit, SIGTERM/SIGHUP, Ctrl-C). Containers carry the
label ``org.mqbed.home=<home>``, so `down` also removes any this testbed left unrecorded.
"""

from __future__ import annotations

__all__ = ["DockerBackend", "STATE_FILE"]

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.backends.docker_containers import (
    LABEL_HOME,
    Kind,
    await_exit,
    await_healthy,
    check_up_args,
    create_container,
    graceful_stop,
    new_record,
    remove_container,
)
from testbed.backends.docker_nodes import ContainerDriver, container_drivers
from testbed.backends.images import ensure_images
from testbed.backends.node_driver import NotHealthy
from testbed.backends.ports import pick_free_ports
from testbed.backends.state import HomeLock, NodeRecord, TestbedState, testbed_id
from testbed.exceptions import BackendError, ConfigurationError

STATE_FILE = "docker-state.json"


class DockerBackend:
    """Broker containers for the testbed whose directory is `home`.

    `docker_host`: the engine's API URL (``unix:///path/docker.sock``); default: the engine
    recorded in the state file, else ``$DOCKER_HOST``, else the standard socket. `images`:
    kind → image ref, to use other images than the offline builds (they must have the Debian
    layout). `log`: progress messages (image builds).
    """

    def __init__(
        self,
        home: Path | str,
        docker_host: str | None = None,
        *,
        images: dict[str, str] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.home = Path(home).expanduser().resolve()
        self.state_path = self.home / STATE_FILE
        self.docker_host = docker_host
        self.images = dict(images or {})
        self.log = log
        self.startup_seconds: dict[str, float] = {}
        """Seconds from container start to healthy of each node started by this object."""
        self._lock = HomeLock(self.home)
        self._drivers: dict[str, ContainerDriver] = container_drivers()
        self._client_obj: Any = None
        self._cleanup_installed = False

    # ----------------------------------------------------------------- public API

    def up(
        self,
        kinds: Sequence[Kind],
        *,
        nodes: int = 1,
        timeout: float = 90.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
    ) -> list[BrokerEndpoint]:
        """Start `nodes` broker containers of each kind, wait (≤ `timeout` s) until healthy.

        Kinds already running in this home with the same node count are reused. Missing
        offline images are built first (not counted in `timeout`). `memory_limit_mb`:
        ActiveMQ's memoryUsage limit (default 256) and RabbitMQ's absolute high watermark.
        """
        wanted = check_up_args(kinds, nodes, timeout, memory_limit_mb)
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        client = self._client()
        with self._lock:
            state = self._load() or TestbedState(testbed_id(self.home), str(self.home))
            reused = [k for k in wanted if self._reusable(state, k, nodes)]
            todo = [k for k in wanted if k not in reused]
            if todo:
                refs = self._image_refs(client, todo)
                host = self.docker_host or os.environ.get("DOCKER_HOST")
                new = [
                    new_record(self.home, state.testbed_id, k, i, detach=detach,
                               memory_mb=memory_limit_mb, image=refs[k], docker_host=host)
                    for k in todo
                    for i in range(nodes)
                ]  # fmt: skip
                self._start_new(state, new, timeout=timeout, owned=not detach)
            return [self._endpoint(r) for r in state.nodes if r.kind in wanted]

    def down(self, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        """Remove every container of this testbed, remove the state; return the node names.

        Idempotent. Node data is deleted unless `keep_data`; logs are kept. If the engine the
        containers were made on no longer answers, only the state and data are removed.
        """
        state = self._load()
        if state is None and not self.home.exists():
            return []
        with self._lock:
            state = self._load()
            names = [r.name for r in state.nodes] if state else []
            try:
                client = self._client()
            except BackendError:
                # No engine answers where the containers were made: they cannot be running
                # (containers stop with their dockerd), so there is nothing left to remove.
                client = None
            if client is not None:
                for rec in state.nodes if state else []:
                    remove_container(client, rec)
                for container in self._labelled():
                    container.remove(force=True)
            if state is not None and not keep_data:
                for rec in state.nodes:
                    for sub in ("data", "tmp"):
                        shutil.rmtree(Path(rec.node_dir) / sub, ignore_errors=True)
            self.state_path.unlink(missing_ok=True)
            return names

    def endpoints(self) -> list[BrokerEndpoint]:
        """Endpoints of every recorded node (stopped or killed ones included)."""
        state = self._load()
        return [self._endpoint(r) for r in state.nodes] if state else []

    def container(self, name: str) -> Any:
        """The ``docker.models.containers.Container`` running node `name`."""
        return self._container(self._state().node(name))

    def stop_node(self, name: str, timeout: float = 30.0) -> None:
        """Graceful stop (SIGTERM; SIGKILL after `timeout` s). The node stays recorded."""
        with self._locked_state() as state:
            rec = state.node(name)
            self._graceful_stop(rec, timeout)

    def kill_node(self, name: str) -> None:
        """SIGKILL the container (a crash); waits until it has exited. Stays recorded."""
        container = self.container(name)
        container.reload()
        if container.status == "paused":
            container.unpause()
        if container.status in ("running", "paused"):
            container.kill()
        await_exit(container, 15.0, name)

    def pause_node(self, name: str) -> None:
        """Freeze the container (cgroup freezer): its ports still accept, nothing answers."""
        container = self._running_container(name)
        container.pause()

    def resume_node(self, name: str) -> None:
        """Thaw a container frozen by `pause_node`."""
        container = self.container(name)
        container.reload()
        if container.status != "paused":
            raise BackendError(f"node {name!r} is {container.status}, not paused")
        container.unpause()

    def restart_node(self, name: str, timeout: float = 90.0) -> BrokerEndpoint:
        """Stop the container if it runs, start it again (same ports, data and node name).

        Durable queues and persistent messages survive. Waits ≤ `timeout` s for health.
        """
        with self._locked_state() as state:
            rec = state.node(name)
            self._graceful_stop(rec, 30.0)
            container = self._container(rec)
            t0 = time.monotonic()
            container.start()
            await_healthy(rec, container, self._drivers[rec.kind], t0 + timeout)
            self._record_startup(rec, t0)
            state.save(self.state_path)
            return self._endpoint(rec)

    def is_healthy(self, name: str, timeout: float = 2.0) -> bool:
        """Whether the node's container runs (not paused) and its probe passes in `timeout` s."""
        rec = self._state().node(name)
        try:
            container = self._container(rec)
        except BackendError:
            return False
        if container.status != "running":
            return False
        try:
            self._drivers[rec.kind].probe(rec, timeout)
        except NotHealthy:
            return False
        return True

    def rabbitmqctl(
        self, name: str, *args: str, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl -n NODE -t TIMEOUT ARGS`` inside node `name`'s container.

        Same result shape as `LocalBackend.rabbitmqctl` (the fault injector uses either).
        """
        rec = self._state().node(name)
        if rec.kind != "rabbitmq":
            raise BackendError(f"rabbitmqctl: node {name!r} is {rec.kind}, not rabbitmq")
        argv = ["rabbitmqctl", "-n", str(rec.params["erlang_node"]), "-t", str(int(timeout)), *args]
        code, (out, err) = self._running_container(name).exec_run(argv, demux=True)
        return subprocess.CompletedProcess(
            argv,
            int(code),
            (out or b"").decode(errors="replace"),
            (err or b"").decode(errors="replace"),
        )

    def close(self) -> None:
        """Close the API connection (containers are not touched)."""
        if self._client_obj is not None:
            self._client_obj.close()
            self._client_obj = None

    # ----------------------------------------------------------------- starting

    def _client(self) -> Any:
        if self._client_obj is None:
            import docker
            import docker.errors

            if self.docker_host is None:  # the engine the recorded containers live on
                self.docker_host = self._recorded_host()
            try:
                if self.docker_host:
                    client = docker.DockerClient(base_url=self.docker_host, timeout=120)
                else:
                    client = docker.from_env(timeout=120)
                client.ping()
            except docker.errors.DockerException as exc:
                where = self.docker_host or os.environ.get("DOCKER_HOST") or "the default socket"
                raise BackendError(
                    f"no Docker engine answers at {where}: {exc}; start one (dockerd, or "
                    "testbed.backends.docker_engine.DockerEngine) and set DOCKER_HOST"
                ) from exc
            self._client_obj = client
        return self._client_obj

    def _recorded_host(self) -> str | None:
        try:
            state = self._load()
        except ConfigurationError:
            return None
        hosts = [r.params.get("docker_host") for r in state.nodes] if state else []
        return next((str(h) for h in hosts if h), None)

    def _image_refs(self, client: Any, kinds: Sequence[Kind]) -> dict[str, str]:
        missing = [self._drivers[k].image for k in kinds if k not in self.images]
        built = ensure_images(missing, client, log=self.log) if missing else {}
        return {k: self.images.get(k) or built[self._drivers[k].image] for k in kinds}

    def _reusable(self, state: TestbedState, kind: Kind, nodes: int) -> bool:
        recs = [r for r in state.nodes if r.kind == kind]
        alive = [r for r in recs if self._status(r) == "running"]
        if not alive:
            client = self._client()
            for rec in recs:  # stale records: their containers go, then the records
                remove_container(client, rec)
            state.nodes = [r for r in state.nodes if r.kind != kind]
            return False
        if len(alive) == len(recs) == nodes:
            return True
        raise BackendError(
            f"testbed {self.home}: {len(alive)} of {len(recs)} {kind} container(s) running "
            f"(asked for {nodes}); run `mqbed down --backend docker` first"
        )

    def _start_new(
        self, state: TestbedState, recs: list[NodeRecord], *, timeout: float, owned: bool
    ) -> None:
        names = [n for r in recs for n in self._drivers[r.kind].port_names]
        ports = iter(pick_free_ports(len(names), exclude=state.used_ports()))
        for rec in recs:
            rec.ports = {n: next(ports) for n in self._drivers[rec.kind].port_names}
            rec.owner_pid = os.getpid() if owned else None
        state.nodes.extend(recs)
        if owned:
            self._install_cleanup()
        client = self._client()
        started: dict[str, float] = {}
        try:
            for rec in recs:
                self._drivers[rec.kind].prepare(rec)
                container = create_container(client, rec, self._drivers[rec.kind], self.home)
                state.save(self.state_path)
                started[rec.name] = time.monotonic()
                container.start()
            deadline = time.monotonic() + timeout
            with ThreadPoolExecutor(len(recs), thread_name_prefix="mqbed-health") as pool:
                futures = [
                    pool.submit(
                        await_healthy, r, self._container(r), self._drivers[r.kind], deadline
                    )
                    for r in recs
                ]
                errors = [e for e in (f.exception() for f in futures) if e is not None]
            if errors:
                raise errors[0]
        except BaseException:
            for rec in recs:
                with contextlib.suppress(Exception):
                    remove_container(client, rec)
            state.nodes = [r for r in state.nodes if r not in recs]
            if state.nodes:
                state.save(self.state_path)
            else:
                self.state_path.unlink(missing_ok=True)
            raise
        for rec in recs:
            self._record_startup(rec, started[rec.name])
        state.save(self.state_path)

    def _record_startup(self, rec: NodeRecord, t0: float) -> None:
        rec.startup_seconds = round(time.monotonic() - t0, 3)
        self.startup_seconds[rec.name] = rec.startup_seconds

    # ----------------------------------------------------------------- stopping

    def _graceful_stop(self, rec: NodeRecord, timeout: float) -> None:
        graceful_stop(rec, self._container(rec), timeout)

    def _labelled(self) -> list[Any]:
        """Containers labelled with this home (leftovers included); [] without an engine."""
        try:
            client = self._client()
        except BackendError:
            return []
        return list(
            client.containers.list(all=True, filters={"label": f"{LABEL_HOME}={self.home}"})
        )

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
        """atexit: remove the containers this process owns (all of them → a full `down`)."""
        try:
            state = self._load()
            if state is None:
                return
            mine = [r for r in state.nodes if not r.detached and r.owner_pid == os.getpid()]
            if not mine:
                return
            if len(mine) == len(state.nodes):
                self.down(timeout=15.0)
                return
            with self._lock:
                client = self._client()
                for rec in mine:
                    remove_container(client, rec)
                state.nodes = [r for r in state.nodes if r not in mine]
                state.save(self.state_path)
        except Exception as exc:  # at exit there is nobody left to raise to
            print(f"mqbed: cleanup of {self.home} failed: {exc}", file=sys.stderr)

    # ----------------------------------------------------------------- helpers

    def _load(self) -> TestbedState | None:
        return TestbedState.load(self.state_path)

    def _state(self) -> TestbedState:
        state = self._load()
        if state is None:
            raise BackendError(f"no docker testbed in {self.home} (no {self.state_path})")
        return state

    @contextlib.contextmanager
    def _locked_state(self) -> Iterator[TestbedState]:
        self._state()
        with self._lock:
            yield self._state()

    def _container(self, rec: NodeRecord) -> Any:
        import docker.errors

        try:
            return self._client().containers.get(str(rec.params["container"]))
        except docker.errors.NotFound as exc:
            raise BackendError(
                f"container {rec.params['container']} of node {rec.name!r} is gone"
            ) from exc

    def _running_container(self, name: str) -> Any:
        container = self.container(name)
        if container.status != "running":
            raise BackendError(f"node {name!r} of testbed {self.home} is {container.status}")
        return container

    def _status(self, rec: NodeRecord) -> str:
        try:
            return str(self._container(rec).status)
        except BackendError:
            return "gone"

    def _endpoint(self, rec: NodeRecord) -> BrokerEndpoint:
        return self._drivers[rec.kind].endpoint(rec)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
