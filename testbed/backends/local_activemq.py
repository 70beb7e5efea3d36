"""ActiveMQ 5.17 brokers as plain JVM processes, one instance directory per `NodeRecord`.

The Debian package ships ``/usr/share/activemq/bin/activemq.jar`` but no per-instance start
script, so we run ``java -jar activemq.jar start xbean:file:BASE/conf/activemq.xml`` with the
system properties and ``--add-opens`` list of ``/usr/bin/activemq``. ``BASE/lib`` gets
xstream.jar and jettison.jar (without them a MapMessage to a STOMP subscriber — statistics
plugin replies — kills the connection). Logging is log4j 1.2.
"""

from __future__ import annotations

__all__ = ["ACTIVEMQ_HOME", "ActiveMQDriver", "activemq_version", "stomp_connect"]

import contextlib
import os
import shutil
import socket
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from testbed.backends.base import BrokerEndpoint
from testbed.backends.node_driver import NotHealthy, clean_env, deploy_dir, write_private
from testbed.backends.ports import LOOPBACK
from testbed.backends.state import NodeRecord, TestbedState
from testbed.exceptions import BackendError

ACTIVEMQ_HOME = Path("/usr/share/activemq")
_EXTRA_JARS = ("xstream.jar", "jettison.jar")
_JAVA_MODULE_FLAGS = [
    "--add-reads=java.xml=java.logging",
    "--add-opens=java.base/java.security=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.http=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.https=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.www.protocol.jar=ALL-UNNAMED",
    "--add-exports=jdk.xml.dom/org.w3c.dom.html=ALL-UNNAMED",
    "--add-exports=jdk.naming.rmi/com.sun.jndi.url.rmi=ALL-UNNAMED",
]


def activemq_version() -> str | None:
    """ActiveMQ version from the broker jar's manifest (``Implementation-Version``)."""
    jar = ACTIVEMQ_HOME / "lib" / "activemq-broker.jar"
    try:
        with zipfile.ZipFile(jar) as zf:
            manifest = zf.read("META-INF/MANIFEST.MF").decode(errors="replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        if line.startswith("Implementation-Version:"):
            return line.split(":", 1)[1].strip()
    return None


def stomp_connect(port: int, username: str, password: str, timeout: float) -> dict[str, str]:
    """STOMP 1.2 CONNECT to 127.0.0.1:`port`; return the CONNECTED frame's headers.

    Raises `NotHealthy` on refusal, an ERROR frame, or no reply within `timeout` seconds.
    """
    frame = (
        f"CONNECT\naccept-version:1.2\nhost:{LOOPBACK}\nlogin:{username}\n"
        f"passcode:{password}\nheart-beat:0,0\n\n\0"
    ).encode()
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(frame)
            reply = b""
            while b"\0" not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
            if reply.startswith(b"CONNECTED"):
                with contextlib.suppress(OSError):
                    sock.sendall(b"DISCONNECT\n\n\0")
    except TimeoutError as exc:
        raise NotHealthy(f"STOMP {LOOPBACK}:{port}: no CONNECTED within {timeout} s") from exc
    except OSError as exc:
        raise NotHealthy(f"STOMP {LOOPBACK}:{port}: {exc}") from exc
    head, _, _ = reply.partition(b"\n\n")
    lines = head.decode(errors="replace").splitlines()
    if not lines or lines[0] != "CONNECTED":
        summary = head.decode(errors="replace").replace("\n", " | ")[:200] or "connection closed"
        raise NotHealthy(f"STOMP {LOOPBACK}:{port}: CONNECT answered {summary!r}")
    return dict(line.split(":", 1) for line in lines[1:] if ":" in line)


class ActiveMQDriver:
    """Configures, starts and probes ActiveMQ 5.17 brokers (Debian package layout)."""

    kind: ClassVar[str] = "activemq"
    port_names: ClassVar[tuple[str, ...]] = ("stomp", "openwire")

    def marker(self, state: TestbedState) -> str:
        return state.home

    @staticmethod
    def _dirs(rec: NodeRecord) -> dict[str, Path]:
        base = Path(rec.node_dir)
        return {n: base / n for n in ("conf", "data", "lib", "tmp", "log")}

    @staticmethod
    def _java() -> str:
        java_home = os.environ.get("JAVA_HOME")
        candidate = Path(java_home) / "bin" / "java" if java_home else None
        exe = str(candidate) if candidate and candidate.exists() else shutil.which("java")
        if not exe:
            raise BackendError("java not found on PATH: install openjdk-17-jre-headless")
        return exe

    def prepare(self, rec: NodeRecord, state: TestbedState) -> None:
        if not (ACTIVEMQ_HOME / "bin" / "activemq.jar").exists():
            raise BackendError(
                f"{ACTIVEMQ_HOME}/bin/activemq.jar not found: install the activemq package"
            )
        dirs = self._dirs(rec)
        for path in dirs.values():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        templates = deploy_dir("activemq")
        for name in ("activemq.xml", "log4j.properties"):
            shutil.copyfile(templates / name, dirs["conf"] / name)
        for jar in _EXTRA_JARS:
            source, target = Path("/usr/share/java") / jar, dirs["lib"] / jar
            if not source.exists():
                raise BackendError(
                    f"{source} not found: install libxstream-java and libjettison-java "
                    "(needed for MapMessages over STOMP)"
                )
            if not target.exists():
                target.symlink_to(source)
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

    def command(self, rec: NodeRecord, state: TestbedState) -> tuple[list[str], dict[str, str]]:
        dirs = self._dirs(rec)
        base = Path(rec.node_dir)
        argv = [
            self._java(),
            "-Xms64m",
            f"-Xmx{int(rec.params['heap_mb'])}m",
            "-Djava.awt.headless=true",
            *_JAVA_MODULE_FLAGS,
            f"-Dmqbed.home={self.marker(state)}",
            f"-Dactivemq.classpath={dirs['conf']}",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={base}",
            f"-Dactivemq.conf={dirs['conf']}",
            f"-Dactivemq.data={dirs['data']}",
            f"-Djava.io.tmpdir={dirs['tmp']}",
            f"-Dlog4j.configuration=file:{dirs['conf'] / 'log4j.properties'}",
            "-jar",
            str(ACTIVEMQ_HOME / "bin" / "activemq.jar"),
            "start",
            f"xbean:file:{dirs['conf'] / 'activemq.xml'}",
        ]
        return argv, clean_env({})

    def before_stop(self, rec: NodeRecord, state: TestbedState) -> None:
        """Nothing to do: the JVM's shutdown hook stops the broker on SIGTERM in ~1.5 s."""

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        headers = stomp_connect(rec.ports["stomp"], rec.username, rec.password, timeout)
        server = headers.get("server", "")
        return server.split("/", 1)[1] if "/" in server else activemq_version()

    def endpoint(self, rec: NodeRecord, state: TestbedState) -> BrokerEndpoint:
        return BrokerEndpoint(
            kind="activemq",
            name=rec.name,
            host=LOOPBACK,
            port=rec.ports["stomp"],
            username=rec.username,
            password=rec.password,
            vhost="/",
            management_url=None,
            prometheus_url=None,
            extra_ports={"openwire": rec.ports["openwire"]},
            pid=rec.process.pid if rec.process else None,
            pgid=rec.process.pgid if rec.process else None,
            data_dir=str(self._dirs(rec)["data"]),
            version=rec.version,
        )

    def log_files(self, rec: NodeRecord) -> Sequence[Path]:
        return [self._dirs(rec)["log"] / "activemq.log", Path(rec.node_dir) / "console.log"]
