"""A broker container started through testcontainers, for the pytest plugin.

The container is configured exactly as the docker backend configures its own
(`testbed.backends.docker_nodes`: the offline image, the node directory rendered from
``deploy/<kind>`` and bind-mounted, generated credentials, every port a free 127.0.0.1 port of
the host, host networking), but its lifecycle is testcontainers' ``DockerContainer``: started
for a test session, removed (``docker rm -f``) when the session ends. Runs reach it as an
external broker (``broker.backend: external`` with `broker_url`), so lifecycle faults (kill,
pause, restart) are refused on it; network faults go through the fault proxy as usual.

The engine is testcontainers' (``$DOCKER_HOST``, else the standard socket). Where no image
registry is reachable, set ``TESTCONTAINERS_RYUK_DISABLED=true``: testcontainers' reaper image
cannot be pulled there (the plugin removes its containers itself).
"""

from __future__ import annotations

__all__ = ["BrokerContainer", "broker_url", "docker_engine_error", "start_broker_container"]

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.backends.docker_containers import new_record
from testbed.backends.docker_nodes import NODE_MOUNT, container_drivers
from testbed.backends.external import endpoint_url
from testbed.backends.images import ensure_image
from testbed.backends.node_driver import NotHealthy, log_tail
from testbed.backends.ports import pick_free_ports
from testbed.backends.state import testbed_id
from testbed.backends.warm_up import warm_up
from testbed.exceptions import BackendError, BrokerStartError


def docker_engine_error(timeout: float = 5.0) -> str | None:
    """Why no Docker engine answers where testcontainers looks (None: one answers)."""
    import docker
    import docker.errors
    from testcontainers.core.docker_client import get_docker_host

    where = get_docker_host() or "the default socket"
    try:
        client = docker.from_env(timeout=int(max(1, timeout)))
    except docker.errors.DockerException as exc:
        return f"no Docker engine at {where}: {exc}"
    try:
        client.ping()
    except Exception as exc:  # any transport error means "not reachable"
        return f"no Docker engine answers at {where}: {exc}"
    finally:
        client.close()
    return None


def broker_url(ep: BrokerEndpoint) -> str:
    """The external backend's URL for `ep` (``amqp://`` with its management and Prometheus
    URLs, or ``stomp://``); user and password percent-encoded (`endpoint_url`: the external
    backend owns its URL format)."""
    return endpoint_url(ep)


@dataclass
class BrokerContainer:
    """A running broker container: its endpoint, URL and testcontainers handle."""

    endpoint: BrokerEndpoint
    container: Any
    """``testcontainers.core.container.DockerContainer``."""
    startup_seconds: float

    @property
    def url(self) -> str:
        return broker_url(self.endpoint)

    def stop(self) -> None:
        """Remove the container (idempotent)."""
        if self.container is not None:
            self.container.stop()
            self.container = None


def start_broker_container(
    kind: str,
    workdir: Path,
    *,
    timeout: float = 120.0,
    image: str | None = None,
    log: Callable[[str], None] | None = None,
) -> BrokerContainer:
    """Start a `kind` broker container (node files under `workdir`), wait until it serves
    clients (≤ `timeout` s after start; a missing offline image is built first, not counted),
    and return it. `image`: another image with the Debian layout of the offline ones."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.docker_client import DockerClient

    drivers = container_drivers()
    if kind not in drivers:
        raise BackendError(f"broker kind {kind!r} is not one of {sorted(drivers)}")
    driver = drivers[kind]
    workdir = Path(workdir).resolve()
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    client = DockerClient(timeout=300)
    try:
        ref = image or ensure_image(driver.image, client.client, log=log)
    finally:
        client.client.close()
    rec = new_record(workdir, testbed_id(workdir), kind, 0, detach=False,  # type: ignore[arg-type]
                     memory_mb=None, image=ref, docker_host=None)  # fmt: skip
    rec.ports = dict(zip(driver.port_names, pick_free_ports(len(driver.port_names)), strict=True))
    driver.prepare(rec)
    args = driver.container_args(rec)
    container = (
        DockerContainer(ref, command=args["command"], env=args["environment"])
        .with_name(str(rec.params["container"]))
        .with_volume_mapping(rec.node_dir, NODE_MOUNT, "rw")
        .with_kwargs(network_mode="host", init=True, working_dir=NODE_MOUNT)
    )
    t0 = time.monotonic()
    container.start()
    try:
        rec.version = _await_healthy(container, lambda t: driver.probe(rec, t), t0 + timeout)
    except BaseException as exc:
        logs = log_tail(driver.log_files(rec))
        container.stop()
        if isinstance(exc, BrokerStartError):
            raise BrokerStartError(f"{exc}\n{logs}") from None
        raise
    endpoint = replace(driver.endpoint(rec), name=f"testcontainers-{kind}")
    try:
        warm_up(endpoint)  # a fresh JVM broker is slow until its JIT has seen the message path
    except BaseException:
        container.stop()
        raise
    return BrokerContainer(endpoint, container, round(time.monotonic() - t0, 3))


def _await_healthy(container: Any, probe: Callable[[float], str | None], deadline: float) -> str:
    """Probe until the broker answers; the version it reports. `BrokerStartError` when the
    container exits or the deadline passes."""
    last = "not probed yet"
    while True:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status not in ("created", "running"):
            out = wrapped.logs(tail=15).decode(errors="replace").strip()
            raise BrokerStartError(
                f"container {wrapped.name} is {wrapped.status} before serving clients\n{out}"
            )
        remaining = deadline - time.monotonic()
        try:
            return probe(max(0.2, min(2.0, remaining))) or "unknown"
        except NotHealthy as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise BrokerStartError(f"container {wrapped.name} not serving clients: {last}")
        time.sleep(0.2)
