"""What the docker backend needs to know about each broker kind: config, container, probe.

A node's directory on the host (config, data, logs) is bind-mounted at `NODE_MOUNT` in its
container, so the same files the local backend renders (``deploy/rabbitmq``,
``deploy/activemq``) configure the container. Containers use host networking, so every port
is a free 127.0.0.1 port picked on the host, exactly like the local backend's; RabbitMQ nodes
also get their own epmd port (``ERL_EPMD_PORT``) and Erlang distribution port.
"""

from __future__ import annotations

__all__ = [
    "ActiveMQContainer",
    "ContainerDriver",
    "NODE_MOUNT",
    "RabbitMQContainer",
    "container_drivers",
]

import shutil
from pathlib import Path
from typing import Any, ClassVar, Protocol

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local_activemq import _JAVA_MODULE_FLAGS, stomp_connect
from testbed.backends.local_rabbitmq import RabbitMQDriver
from testbed.backends.node_driver import deploy_dir, render_template, write_private
from testbed.backends.ports import LOOPBACK
from testbed.backends.state import NodeRecord

NODE_MOUNT = "/var/lib/mqbed/node"
"""Where a node's host directory appears inside its container."""
_DIST_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"


class ContainerDriver(Protocol):
    """One broker kind as the docker backend runs it."""

    kind: ClassVar[str]
    image: ClassVar[str]
    """Short name of the offline image (see `testbed.backends.images`)."""
    port_names: ClassVar[tuple[str, ...]]

    def prepare(self, rec: NodeRecord) -> None:
        """Create the node's directories and config files on the host (idempotent)."""

    def container_args(self, rec: NodeRecord) -> dict[str, Any]:
        """``command`` and ``environment`` for ``containers.create`` (mounts are added)."""

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        """Raise `NotHealthy` unless the broker serves clients; return its version."""

    def endpoint(self, rec: NodeRecord) -> BrokerEndpoint:
        """The node as clients see it (on 127.0.0.1)."""

    def log_files(self, rec: NodeRecord) -> list[Path]:
        """Broker log files on the host, most useful first."""


def _dirs(rec: NodeRecord, names: tuple[str, ...]) -> dict[str, Path]:
    base = Path(rec.node_dir)
    return {n: base / n for n in names}


class RabbitMQContainer:
    """RabbitMQ (Debian's rabbitmq-server) in a container with host networking."""

    kind: ClassVar[str] = "rabbitmq"
    image: ClassVar[str] = "rabbitmq"
    port_names: ClassVar[tuple[str, ...]] = ("amqp", "management", "prometheus", "dist", "epmd")
    _subdirs: ClassVar[tuple[str, ...]] = ("conf", "data", "log", "erlang")

    def prepare(self, rec: NodeRecord) -> None:
        dirs = _dirs(rec, self._subdirs)
        for path in dirs.values():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        templates = deploy_dir("rabbitmq")
        extra = ""
        if rec.params.get("memory_limit_mb"):
            extra = f"vm_memory_high_watermark.absolute = {int(rec.params['memory_limit_mb'])}MB"
        render_template(
            templates / "rabbitmq.conf.tmpl",
            dirs["conf"] / "rabbitmq.conf",
            {
                "amqp_port": rec.ports["amqp"],
                "management_port": rec.ports["management"],
                "prometheus_port": rec.ports["prometheus"],
                "username": rec.username,
                "password": rec.password,
                "extra": extra,
            },
            0o600,
        )
        for name in ("enabled_plugins", "advanced.config"):
            shutil.copyfile(templates / name, dirs["conf"] / name)
        write_private(dirs["conf"] / "rabbitmq-env.conf", "# mqbed: intentionally empty\n")
        cookie = dirs["erlang"] / ".erlang.cookie"
        if not cookie.exists():
            write_private(cookie, str(rec.params["cookie"]), 0o400)

    def container_args(self, rec: NodeRecord) -> dict[str, Any]:
        conf = f"{NODE_MOUNT}/conf"
        return {
            "command": ["/usr/lib/rabbitmq/bin/rabbitmq-server"],
            "environment": {
                "HOME": f"{NODE_MOUNT}/erlang",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
                "RABBITMQ_NODENAME": str(rec.params["erlang_node"]),
                "RABBITMQ_CONFIG_FILE": f"{conf}/rabbitmq.conf",
                "RABBITMQ_ADVANCED_CONFIG_FILE": f"{conf}/advanced.config",
                "RABBITMQ_ENABLED_PLUGINS_FILE": f"{conf}/enabled_plugins",
                "RABBITMQ_CONF_ENV_FILE": f"{conf}/rabbitmq-env.conf",
                "RABBITMQ_MNESIA_BASE": f"{NODE_MOUNT}/data",
                "RABBITMQ_LOG_BASE": f"{NODE_MOUNT}/log",
                "RABBITMQ_DIST_PORT": str(rec.ports["dist"]),
                "ERL_EPMD_PORT": str(rec.ports["epmd"]),
                "ERL_EPMD_ADDRESS": LOOPBACK,
                # exec the VM (no signal-forwarding shell), so `docker stop` reaches beam.smp
                "RABBITMQ_ALLOW_INPUT": "true",
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f"{_DIST_ARGS} -noinput",
                "RABBITMQ_CTL_ERL_ARGS": _DIST_ARGS,
            },
        }

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        # The local driver's probe reads only ports and credentials: AMQP port + /api/overview.
        return RabbitMQDriver().probe(rec, timeout)

    def endpoint(self, rec: NodeRecord) -> BrokerEndpoint:
        return BrokerEndpoint(
            kind="rabbitmq",
            name=rec.name,
            host=LOOPBACK,
            port=rec.ports["amqp"],
            username=rec.username,
            password=rec.password,
            vhost="/",
            management_url=f"http://{LOOPBACK}:{rec.ports['management']}",
            prometheus_url=f"http://{LOOPBACK}:{rec.ports['prometheus']}",
            extra_ports={k: v for k, v in rec.ports.items() if k != "amqp"},
            data_dir=str(Path(rec.node_dir) / "data"),
            version=rec.version,
        )

    def log_files(self, rec: NodeRecord) -> list[Path]:
        return [Path(rec.node_dir) / "log" / f"{rec.params['erlang_node']}.log"]


class ActiveMQContainer:
    """ActiveMQ 5.17 (Debian's activemq) in a container with host networking."""

    kind: ClassVar[str] = "activemq"
    image: ClassVar[str] = "activemq"
    port_names: ClassVar[tuple[str, ...]] = ("stomp", "openwire")
    _subdirs: ClassVar[tuple[str, ...]] = ("conf", "data", "lib", "tmp", "log")
    _jars: ClassVar[tuple[str, ...]] = ("xstream.jar", "jettison.jar")

    def prepare(self, rec: NodeRecord) -> None:
        dirs = _dirs(rec, self._subdirs)
        for path in dirs.values():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        templates = deploy_dir("activemq")
        for name in ("activemq.xml", "log4j.properties"):
            shutil.copyfile(templates / name, dirs["conf"] / name)
        for jar in self._jars:  # resolved inside the container (the image has them)
            link = dirs["lib"] / jar
            if not link.is_symlink():
                link.symlink_to(Path("/usr/share/java") / jar)
        props = {
            "mqbed.broker.name": rec.params["broker_name"],
            "mqbed.username": rec.username,
            "mqbed.password": rec.password,
            "mqbed.memory.limit": f"{int(rec.params['memory_limit_mb'])} mb",
            "mqbed.store.limit": f"{int(rec.params.get('store_limit_mb', 4096))} mb",
            "mqbed.temp.limit": f"{int(rec.params.get('temp_limit_mb', 1024))} mb",
            "mqbed.stomp.port": rec.ports["stomp"],
            "mqbed.openwire.port": rec.ports["openwire"],
        }
        text = "# written by mqbed for one broker; holds credentials\n" + "".join(
            f"{k}={v}\n" for k, v in props.items()
        )
        write_private(dirs["conf"] / "mqbed.properties", text)

    def container_args(self, rec: NodeRecord) -> dict[str, Any]:
        conf = f"{NODE_MOUNT}/conf"
        return {
            "command": [
                "java",
                "-Xms64m",
                f"-Xmx{int(rec.params['heap_mb'])}m",
                "-Djava.awt.headless=true",
                *_JAVA_MODULE_FLAGS,
                f"-Dactivemq.classpath={conf}",
                "-Dactivemq.home=/usr/share/activemq",
                f"-Dactivemq.base={NODE_MOUNT}",
                f"-Dactivemq.conf={conf}",
                f"-Dactivemq.data={NODE_MOUNT}/data",
                f"-Djava.io.tmpdir={NODE_MOUNT}/tmp",
                f"-Dlog4j.configuration=file:{conf}/log4j.properties",
                "-jar",
                "/usr/share/activemq/bin/activemq.jar",
                "start",
                f"xbean:file:{conf}/activemq.xml",
            ],
            "environment": {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
        }

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        headers = stomp_connect(rec.ports["stomp"], rec.username, rec.password, timeout)
        server = headers.get("server", "")
        return server.split("/", 1)[1] if "/" in server else None

    def endpoint(self, rec: NodeRecord) -> BrokerEndpoint:
        return BrokerEndpoint(
            kind="activemq",
            name=rec.name,
            host=LOOPBACK,
            port=rec.ports["stomp"],
            username=rec.username,
            password=rec.password,
            vhost="/",
            extra_ports={"openwire": rec.ports["openwire"]},
            data_dir=str(Path(rec.node_dir) / "data"),
            version=rec.version,
        )

    def log_files(self, rec: NodeRecord) -> list[Path]:
        return [Path(rec.node_dir) / "log" / "activemq.log"]


def container_drivers() -> dict[str, ContainerDriver]:
    """A driver per broker kind."""
    return {"rabbitmq": RabbitMQContainer(), "activemq": ActiveMQContainer()}
