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
    "check_up_args",
    "create_container",
    "graceful_stop",
    "new_record",
    "remove_container",
]

import contextlib
import secrets
import shutil
import string
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from testbed.backends.docker_nodes import NODE_MOUNT, ContainerDriver
from testbed.backends.node_driver import NotHealthy, log_tail
from testbed.backends.state import NodeRecord
from testbed.exceptions import BackendError, BrokerStartError, ConfigurationError

Kind = Literal["rabbitmq", "activemq"]
KINDS: tuple[Kind, ...] = ("rabbitmq", "activemq")
LABEL_HOME = "org.mqbed.home"
LABEL_NODE = "org.mqbed.node"
_DEFAULT_ACTIVEMQ_MEMORY_MB = 256
_DROP_STATS_HANDLER = "gen_event:delete_handler(rabbit_event, rabbit_mgmt_db_handler, [])."


def check_up_args(
    kinds: Sequence[str], nodes: int, timeout: float, memory_limit_mb: int | None
) -> list[Kind]:
    """The distinct broker kinds asked for; `ConfigurationError` naming any bad argument."""
    if isinstance(kinds, str):
        kinds = [kinds]
    wanted: list[Kind] = []
    for kind in kinds:
        if kind not in KINDS:
            raise ConfigurationError(f"broker kind {kind!r} is not one of {list(KINDS)}")
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
    for sub in ("data", "tmp", "erlang"):
        shutil.rmtree(node_dir / sub, ignore_errors=True)
    node_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    params: dict[str, Any] = {
        "memory_limit_mb": memory_mb,
        "image": image,
        "container": f"mqbed-{testbed}-{name}",
        "docker_host": docker_host,
    }
    if kind == "rabbitmq":
        params["erlang_node"] = f"mqbed-{testbed}-{name}@localhost"
        params["cookie"] = "".join(secrets.choice(string.ascii_uppercase) for _ in range(32))
    else:
        mem = memory_mb or _DEFAULT_ACTIVEMQ_MEMORY_MB
        params.update(
            memory_limit_mb=mem, heap_mb=max(512, 2 * mem), broker_name=f"mqbed-{testbed}-{name}"
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
