"""What the local backend needs to know about one broker kind, plus helpers both kinds share.

A `NodeDriver` turns a `NodeRecord` (ports, credentials, directories) into config files, a
command line and an environment, probes health, and describes the node as a `BrokerEndpoint`.
"""

from __future__ import annotations

__all__ = [
    "NodeDriver",
    "NotHealthy",
    "clean_env",
    "deploy_dir",
    "log_tail",
    "render_template",
    "write_private",
]

import os
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, Protocol

from testbed.backends.base import BrokerEndpoint
from testbed.backends.state import NodeRecord, TestbedState
from testbed.exceptions import BackendError

# Variables from the caller's environment that would change how a broker or its CLI starts.
_STRIPPED_PREFIXES = ("RABBITMQ_", "ERL_", "ACTIVEMQ_")
_STRIPPED_NAMES = {"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"}


class NotHealthy(Exception):
    """A health probe failed; the message says which check and why."""


class NodeDriver(Protocol):
    """One broker kind as the local backend drives it."""

    kind: ClassVar[str]
    port_names: ClassVar[tuple[str, ...]]
    """Names of the ports a node needs; the first is the messaging port."""

    def prepare(self, rec: NodeRecord, state: TestbedState) -> None:
        """Create directories and write config files for `rec` (idempotent)."""

    def command(self, rec: NodeRecord, state: TestbedState) -> tuple[list[str], dict[str, str]]:
        """argv and environment that start the node in the foreground."""

    def marker(self, state: TestbedState) -> str:
        """A string the node's command line contains for its whole life."""

    def before_stop(self, rec: NodeRecord, state: TestbedState) -> None:
        """Best-effort preparation for a fast graceful stop (never raises)."""

    def probe(self, rec: NodeRecord, timeout: float) -> str | None:
        """Raise `NotHealthy` unless the node serves clients; return its version if known."""

    def endpoint(self, rec: NodeRecord, state: TestbedState) -> BrokerEndpoint:
        """The node as clients see it."""

    def log_files(self, rec: NodeRecord) -> Sequence[Path]:
        """Files worth showing when the node fails to start, most useful first."""


def deploy_dir(kind: str) -> Path:
    """``deploy/<kind>`` with the config templates (override the root with $MQBED_DEPLOY_DIR)."""
    root = os.environ.get("MQBED_DEPLOY_DIR")
    base = Path(root) if root else Path(__file__).resolve().parents[2] / "deploy"
    path = base / kind
    if not path.is_dir():
        raise BackendError(
            f"config templates for {kind} not found: {path} is not a directory "
            "(set MQBED_DEPLOY_DIR to the folder holding rabbitmq/ and activemq/)"
        )
    return path


def render_template(source: Path, target: Path, values: Mapping[str, object], mode: int) -> None:
    """Fill ``$name`` placeholders of `source` from `values` and write `target` with `mode`."""
    try:
        text = string.Template(source.read_text()).substitute(
            {k: str(v) for k, v in values.items()}
        )
    except KeyError as exc:
        raise BackendError(f"{source}: placeholder ${exc.args[0]} has no value") from exc
    write_private(target, text, mode)


def write_private(target: Path, text: str, mode: int = 0o600) -> None:
    """Write `text` to `target`, created with `mode` (the file may hold credentials)."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(target, mode)


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Our environment minus broker/Erlang/JVM tuning variables, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_STRIPPED_PREFIXES) and k not in _STRIPPED_NAMES
    }
    env.setdefault("LANG", "C.UTF-8")
    env["LC_ALL"] = "C.UTF-8"
    env.update(extra)
    return env


def log_tail(files: Sequence[Path], lines: int = 15) -> str:
    """The last `lines` lines of each existing file in `files`, labelled, for error messages."""
    parts: list[str] = []
    for path in files:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        tail = [ln for ln in text.splitlines() if ln.strip()][-lines:]
        if tail:
            parts.append(f"--- {path} (last {len(tail)} lines) ---\n" + "\n".join(tail))
    return "\n".join(parts) if parts else "(no log output)"
