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
The state file, home lock, data wiping and this cleanup at exit are `OwnedBackend`'s
(`testbed.backends.owned`), shared by the local and docker backends; both implement the
`Backend` contract (`testbed.backends.base`).
"""

from __future__ import annotations

__all__ = ["DockerBackend", "STATE_FILE"]

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from testbed.backends.base import BrokerEndpoint
from testbed.backends.docker_containers import (
    LABEL_HOME,
    await_exit,
    await_healthy,
    create_container,
    graceful_stop,
    new_record,
    remove_container,
)
from testbed.backends.docker_nodes import ContainerDriver, container_drivers
from testbed.backends.images import ensure_images
from testbed.backends.owned import Kind, OwnedBackend, await_all, check_up_args
from testbed.backends.ports import pick_free_ports
from testbed.backends.state import NodeRecord, TestbedState, testbed_id
from testbed.exceptions import BackendError, ConfigurationError

STATE_FILE = "docker-state.json"


class DockerBackend(OwnedBackend):
    """Broker containers for the testbed whose directory is `home`.

    `docker_host`: the engine's API URL (``unix:///path/docker.sock``); default: the engine
    recorded in the state file, else ``$DOCKER_HOST``, else the standard socket. `images`:
    kind → image ref, to use other images than the offline builds (they must have the Debian
    layout). `log`: progress messages (image builds).
    """

    _NO_STATE: ClassVar[str] = "no docker testbed in"
    _RUNNING: ClassVar[str] = "container(s) running"

    def __init__(
        self,
        home: Path | str,
        docker_host: str | None = None,
        *,
        images: dict[str, str] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(home, STATE_FILE)
        self.docker_host = docker_host
        self.images = dict(images or {})
        self.log = log
        self._drivers: dict[str, ContainerDriver] = container_drivers()
        self._client_obj: Any = None

    # ----------------------------------------------------------------- public API

    def up(
        self,
        kinds: Sequence[str],
        *,
        nodes: int = 1,
        timeout: float = 90.0,
        detach: bool = True,
        memory_limit_mb: int | None = None,
        warm: bool = True,
    ) -> list[BrokerEndpoint]:
        """Start `nodes` broker containers of each kind, wait (≤ `timeout` s) until healthy.

        Kinds already running in this home with the same node count are reused. Missing
        offline images are built first (not counted in `timeout`). `memory_limit_mb`:
        ActiveMQ's memoryUsage limit (default 256) and RabbitMQ's absolute high watermark.
        `warm`: warm up each new broker of a kind that needs it (`testbed.backends.warm_up`).
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
                if warm:
                    self._warm([self._endpoint(r) for r in new])
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
                self._wipe_data(state)
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

    def kill_node(self, name: str) -> float | None:
        """SIGKILL the container (a crash); waits until it has exited. Stays recorded.
        Returns the seconds from the kill request until it had exited (None: not running)."""
        container = self.container(name)
        container.reload()
        if container.status == "paused":
            container.unpause()
        if container.status not in ("running", "paused"):
            await_exit(container, 15.0, name)
            return None
        signalled = time.monotonic()
        container.kill()
        await_exit(container, 15.0, name)
        return time.monotonic() - signalled

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
            self._record_startup(rec, time.monotonic() - t0)
            state.save(self.state_path)
            return self._endpoint(rec)

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

    def _running(self, rec: NodeRecord) -> bool:
        return self._status(rec) == "running"  # not paused, not gone

    def _probe(self, rec: NodeRecord, timeout: float) -> None:
        self._drivers[rec.kind].probe(rec, timeout)

    def _discard_stale(self, recs: list[NodeRecord]) -> None:
        client = self._client()
        for rec in recs:  # stale records: their containers go, then the records
            remove_container(client, rec)

    def _release(self, state: TestbedState, recs: list[NodeRecord]) -> None:
        self._discard_stale(recs)  # the owned containers go as stale ones do

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
            containers = {r.name: self._container(r) for r in recs}
            await_all(
                lambda r: await_healthy(r, containers[r.name], self._drivers[r.kind], deadline),
                recs,
            )
        except BaseException:
            for rec in recs:
                with contextlib.suppress(Exception):
                    remove_container(client, rec)
            self._forget(state, recs)
            raise
        for rec in recs:
            self._record_startup(rec, time.monotonic() - started[rec.name])
        state.save(self.state_path)

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

    # ----------------------------------------------------------------- helpers

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
