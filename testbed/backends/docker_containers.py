"""Container-level steps of the docker backend: node records, create, wait, stop, remove.

Plain functions over a ``docker`` SDK client/container, a `NodeRecord` and its
`ContainerDriver`; `DockerBackend` (testbed/backends/docker.py) composes them and keeps the
state file. Every wait is bounded.
"""

from __future__ import annotations

__all__ = [
    "LABEL_HOME",
    "LABEL_NODE",
    "await_exit",
    "await_healthy",
    "create_container",
    "graceful_stop",
    "new_record",
    "remove_container",
]

import contextlib
import secrets
import string
import time
from pathlib import Path
from typing import Any

from testbed.backends.docker_engine import HOME_LABEL
from testbed.backends.docker_nodes import NODE_MOUNT, ContainerDriver
from testbed.backends.node_driver import NotHealthy, log_tail
from testbed.backends.owned import Kind, fresh_record, node_params, wipe_node_state
from testbed.backends.state import NodeRecord
from testbed.exceptions import BackendError, BrokerStartError

LABEL_HOME = HOME_LABEL
LABEL_NODE = "org.mqbed.node"
_DROP_STATS_HANDLER = "gen_event:delete_handler(rabbit_event, rabbit_mgmt_db_handler, [])."


def new_record(
    home: Path,
    testbed: str,
    kind: Kind,
    index: int,
    *,
    detach: bool,
    memory_mb: int | None,
    image: str,
    docker_host: str | None,
) -> NodeRecord:
    """A fresh node (no data, new credentials and Erlang cookie) of testbed id `testbed`."""
    name = f"{kind}{index}"
    node_dir = home / "containers" / name
    wipe_node_state(node_dir, ("data", "tmp", "erlang"))
    node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    params = node_params(kind, testbed, name, memory_mb)
    params.update(image=image, container=f"mqbed-{testbed}-{name}", docker_host=docker_host)
    if kind == "rabbitmq":
        params["cookie"] = "".join(secrets.choice(string.ascii_uppercase) for _ in range(32))
    return fresh_record(name, kind, node_dir, detach=detach, params=params)


def create_container(client: Any, rec: NodeRecord, driver: ContainerDriver, home: Path) -> Any:
    """Create (not start) `rec`'s container: host network, node dir mounted, labelled."""
    import docker.errors

    name = str(rec.params["container"])
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)  # a leftover of this same testbed
    return client.containers.create(
        str(rec.params["image"]),
        name=name,
        network_mode="host",
        init=True,
        labels={LABEL_HOME: str(home), LABEL_NODE: rec.name},
        volumes={rec.node_dir: {"bind": NODE_MOUNT, "mode": "rw"}},
        working_dir=NODE_MOUNT,
        stop_signal="SIGTERM",
        **driver.container_args(rec),
    )


def await_healthy(
    rec: NodeRecord, container: Any, driver: ContainerDriver, deadline: float
) -> None:
    """Probe until healthy (sets ``rec.version``); `BrokerStartError` with logs otherwise."""
    last = "not probed yet"
    while True:
        container.reload()
        if container.status not in ("created", "running"):
            raise BrokerStartError(
                f"{rec.kind} container {container.name} is {container.status} "
                f"(exit code {container.attrs['State'].get('ExitCode')}) before becoming "
                f"healthy; logs in {rec.node_dir}\n{diagnostics(rec, container, driver)}"
            )
        remaining = deadline - time.monotonic()
        try:
            rec.version = driver.probe(rec, timeout=max(0.2, min(2.0, remaining)))
            return
        except NotHealthy as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise BrokerStartError(
                f"{rec.kind} container {container.name} not healthy within the timeout "
                f"({last}); logs in {rec.node_dir}\n{diagnostics(rec, container, driver)}"
            )
        time.sleep(0.2)


def diagnostics(rec: NodeRecord, container: Any, driver: ContainerDriver) -> str:
    """The container's last output and the broker's log tail, for error messages."""
    try:
        output = container.logs(tail=15).decode(errors="replace").strip()
    except Exception as exc:  # diagnostics must not hide the original failure
        output = f"(no container log: {exc})"
    files = log_tail(driver.log_files(rec))
    return f"--- container {container.name} output ---\n{output or '(empty)'}\n{files}"


def graceful_stop(rec: NodeRecord, container: Any, timeout: float) -> None:
    """Thaw if paused, then SIGTERM (SIGKILL after `timeout` s) and wait for the exit."""
    container.reload()
    if container.status == "paused":
        container.unpause()
        container.reload()
    if container.status != "running":
        return
    if rec.kind == "rabbitmq":  # drop the stats handler: SIGTERM then stops in ~1 s
        with contextlib.suppress(Exception):
            node = str(rec.params["erlang_node"])
            container.exec_run(["rabbitmqctl", "-n", node, "-t", "10", "eval",
                                _DROP_STATS_HANDLER])  # fmt: skip
    container.stop(timeout=int(timeout))
    await_exit(container, 15.0, rec.name)


def remove_container(client: Any, rec: NodeRecord) -> None:
    """Force-remove `rec`'s container if it exists."""
    import docker.errors

    try:
        container = client.containers.get(str(rec.params["container"]))
    except docker.errors.NotFound:
        return
    container.remove(force=True)


def await_exit(container: Any, timeout: float, name: str) -> None:
    """Wait until the container is no longer running; `BackendError` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        if container.status in ("exited", "dead", "created"):
            return
        if time.monotonic() >= deadline:
            raise BackendError(
                f"container of node {name!r} still {container.status} after {timeout} s"
            )
        time.sleep(0.1)
