"""RabbitMQ nodes as plain processes: one node per `NodeRecord`, one epmd per testbed.

Each node runs ``/usr/lib/rabbitmq/bin/rabbitmq-server`` directly (the ``/usr/sbin`` wrapper
would switch users) with its own ``RABBITMQ_*`` environment: node name, config, plugins file,
mnesia and log dirs, distribution port bound to 127.0.0.1. All nodes of a testbed share
``HOME/erlang`` (Erlang cookie) and a private epmd on a free 127.0.0.1 port (``ERL_EPMD_PORT``),
so nothing is registered with, or left in, a system-wide epmd.
"""

from __future__ import annotations

__all__ = ["RABBITMQ_SERVER", "RabbitMQDriver", "epmd_command", "erlang_home"]

import base64
import contextlib
import json
import os
import secrets
import shutil
import string
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from testbed.backends.base import BrokerEndpoint
from testbed.backends.node_driver import (
    NotHealthy,
    clean_env,
    deploy_dir,
    render_template,
    write_private,
)
from testbed.backends.ports import LOOPBACK, port_open
from testbed.backends.state import NodeRecord, TestbedState
from testbed.exceptions import BackendError

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_SERVER = RABBITMQ_BIN / "rabbitmq-server"
_DIST_ARGS = "-kernel inet_dist_use_interface {127,0,0,1} -start_epmd false"
# RABBITMQ_ALLOW_INPUT makes rabbitmq-server `exec` the VM instead of running it as a child of a
# signal-forwarding shell, so the PID we start *is* beam.smp (and keeps PR_SET_PDEATHSIG);
# `-noinput` restores what the script would otherwise have passed.
_SERVER_ARGS = f"{_DIST_ARGS} -noinput"
_DROP_STATS_HANDLER = "gen_event:delete_handler(rabbit_event, rabbit_mgmt_db_handler, [])."


def erlang_home(home: Path) -> Path:
    """``HOME`` for every Erlang process of the testbed; holds the shared ``.erlang.cookie``."""
    path = home / "erlang"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    cookie = path / ".erlang.cookie"
    if not cookie.exists():
        value = "".join(secrets.choice(string.ascii_uppercase) for _ in range(32))
        write_private(cookie, value, 0o400)
    return path


def epmd_command(home: Path, port: int) -> tuple[str, list[str]]:
    """(executable, argv) of a foreground epmd on 127.0.0.1:`port` for the testbed in `home`.

    argv[0] carries the testbed home so the process is recognisable as ours in ``ps``.
    """
    exe = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
    if not Path(exe).exists():
        raise BackendError(f"epmd not found (looked for {exe}); install the erlang-base package")
    return os.path.realpath(exe), [
        f"epmd[mqbed:{home}]",
        "-address",
        LOOPBACK,
        "-port",
        str(port),
    ]


class RabbitMQDriver:
    """Configures, starts and probes RabbitMQ 3.10 nodes (Debian package layout)."""

    kind: ClassVar[str] = "rabbitmq"
    port_names: ClassVar[tuple[str, ...]] = ("amqp", "management", "prometheus", "dist")

    def marker(self, state: TestbedState) -> str:
        return state.home

    @staticmethod
    def erlang_node(rec: NodeRecord) -> str:
        return str(rec.params["erlang_node"])

    @staticmethod
    def _dirs(rec: NodeRecord) -> dict[str, Path]:
        base = Path(rec.node_dir)
        return {"conf": base / "conf", "data": base / "data", "log": base / "log"}

    def prepare(self, rec: NodeRecord, state: TestbedState) -> None:
        if not RABBITMQ_SERVER.exists():
            raise BackendError(f"{RABBITMQ_SERVER} not found: install the rabbitmq-server package")
        dirs = self._dirs(rec)
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
        # An empty env file, so that /etc/rabbitmq/rabbitmq-env.conf is never sourced.
        write_private(dirs["conf"] / "rabbitmq-env.conf", "# mqbed: intentionally empty\n")
        erlang_home(Path(state.home))

    def cli_env(self, rec: NodeRecord, state: TestbedState) -> dict[str, str]:
        """Environment shared by the server and `rabbitmqctl` for this node."""
        if state.epmd_port is None:
            raise BackendError(f"testbed {state.home} has no epmd port for node {rec.name}")
        dirs = self._dirs(rec)
        conf = dirs["conf"]
        return clean_env(
            {
                "HOME": str(erlang_home(Path(state.home))),
                "ERL_EPMD_PORT": str(state.epmd_port),
                "ERL_EPMD_ADDRESS": LOOPBACK,
                "RABBITMQ_NODENAME": self.erlang_node(rec),
                "RABBITMQ_CONFIG_FILE": str(conf / "rabbitmq.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(conf / "advanced.config"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(conf / "enabled_plugins"),
                "RABBITMQ_CONF_ENV_FILE": str(conf / "rabbitmq-env.conf"),
                "RABBITMQ_MNESIA_BASE": str(dirs["data"]),
                "RABBITMQ_LOG_BASE": str(dirs["log"]),
                "RABBITMQ_DIST_PORT": str(rec.ports["dist"]),
                "RABBITMQ_CTL_ERL_ARGS": _DIST_ARGS,
            }
        )

    def command(self, rec: NodeRecord, state: TestbedState) -> tuple[list[str], dict[str, str]]:
        # `-mqbed_home X` is passed through to erl as a user flag: it marks the process as ours.
        argv = [str(RABBITMQ_SERVER), "-mqbed_home", self.marker(state)]
        env = self.cli_env(rec, state)
        env.update(RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=_SERVER_ARGS, RABBITMQ_ALLOW_INPUT="true")
        return argv, env

    def before_stop(self, rec: NodeRecord, state: TestbedState) -> None:
        """Remove the management stats event handler, so SIGTERM stops the node in ~1 s.

        In 3.10 that handler's terminate callback blocks for a 5 s call timeout while the
        `rabbit` application shuts down; removed while the node still runs, it costs ~0.5 s.
        """
        with contextlib.suppress(BackendError):
            self.rabbitmqctl(rec, state, ["eval", _DROP_STATS_HANDLER], timeout=10.0)

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        if not port_open(rec.ports["amqp"], timeout=min(timeout, 1.0)):
            raise NotHealthy(f"AMQP port {LOOPBACK}:{rec.ports['amqp']} not accepting connections")
        url = f"http://{LOOPBACK}:{rec.ports['management']}/api/overview"
        token = base64.b64encode(f"{rec.username}:{rec.password}".encode()).decode()
        request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310
                overview = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise NotHealthy(f"GET {url} answered HTTP {exc.code}") from exc
        except (OSError, ValueError) as exc:
            raise NotHealthy(f"GET {url} failed: {exc}") from exc
        version = overview.get("rabbitmq_version")
        return str(version) if version else None

    def endpoint(self, rec: NodeRecord, state: TestbedState) -> BrokerEndpoint:
        extra = {k: v for k, v in rec.ports.items() if k != "amqp"}
        if state.epmd_port:
            extra["epmd"] = state.epmd_port
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
            extra_ports=extra,
            pid=rec.process.pid if rec.process else None,
            pgid=rec.process.pgid if rec.process else None,
            data_dir=str(self._dirs(rec)["data"]),
            version=rec.version,
        )

    def log_files(self, rec: NodeRecord) -> Sequence[Path]:
        return [
            self._dirs(rec)["log"] / f"{self.erlang_node(rec)}.log",
            Path(rec.node_dir) / "console.log",
        ]

    def rabbitmqctl(
        self, rec: NodeRecord, state: TestbedState, args: Sequence[str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl -n NODE ARGS`` with the node's environment (bounded by `timeout`)."""
        argv = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.erlang_node(rec), *args]
        try:
            return subprocess.run(
                argv,
                env=self.cli_env(rec, state),
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendError(
                f"rabbitmqctl {' '.join(args)} on {rec.name} did not finish in {timeout} s"
            ) from exc
