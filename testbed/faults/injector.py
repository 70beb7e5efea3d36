"""Process and broker faults behind one interface: `BrokerFaults`.

`LocalBrokerFaults` acts on the local backend's processes; a docker backend implements the same
Protocol with container operations (``docker kill``/``pause``/``restart``, ``docker exec
rabbitmqctl ...``).

What each fault does, per broker:

- kill: SIGKILL of the node's process group (a crash). start: launch again on the same ports,
  node name and data directory, wait until healthy (durable state survives, transient is gone).
- pause/resume: SIGSTOP/SIGCONT of the process group — ports accept, nothing answers.
- restart: graceful stop (SIGTERM) and start.
- memory alarm (RabbitMQ): ``rabbitmqctl set_vm_memory_high_watermark absolute 1`` raises the
  memory alarm at once, which blocks every publishing connection (no confirms); clearing sets
  the watermark remembered before (relative or absolute).
- disk alarm (RabbitMQ): ``rabbitmqctl set_disk_free_limit`` to 1 EB raises the disk alarm;
  clearing restores the limit read before.
- ActiveMQ 5.17 has no run-time alarm switch in our deployment: its memory/store limits
  (``systemUsage``) are read at start-up, the runtime-configuration plugin does not cover them
  and JMX is off. `supported` says so before a run starts; the calls raise `UnsupportedFault`.
  (Emulate a memory limit on ActiveMQ with a small ``broker.memory_limit`` instead: producers
  block when it is reached.)

Each `rabbitmqctl` call costs ~1 s (it boots an Erlang VM); the alarm is in force when the
call returns. `prepare(node)` reads the values to restore ahead of time so that raising an
alarm is a single call.
"""

from __future__ import annotations

__all__ = [
    "BrokerFaults",
    "LocalBrokerFaults",
    "UnsupportedFault",
    "has_alarms",
    "supported",
]

import re
import threading
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from testbed.core.broker_kinds import KINDS, kind_list
from testbed.core.faultplan import is_broker_fault
from testbed.exceptions import FaultError, MqbedError

if TYPE_CHECKING:
    from testbed.backends.base import Backend

_ALARMS = ("memory_alarm", "disk_alarm")
_HUGE_DISK_LIMIT = str(10**18)  # 1 EB: more free disk than any machine has
_WATERMARK = re.compile(r"^\s*(?:\{absolute,\s*(\d+)\}|([0-9.eE+-]+))\s*$")


class UnsupportedFault(FaultError):
    """The broker or backend cannot do this fault."""


@runtime_checkable
class BrokerFaults(Protocol):
    """Process/broker faults on named nodes (``rabbitmq0``, ``activemq0``, ...)."""

    def kind(self, node: str) -> str:
        """The node's broker kind: ``rabbitmq`` or ``activemq``."""
        ...

    def prepare(self, node: str) -> None:
        """Read what is needed to undo faults later (once, before a timeline starts)."""
        ...

    def kill(self, node: str) -> float | None:
        """Crash the node (SIGKILL); it stays down until `start`. The seconds from the signal
        until the process was gone, when the backend can tell."""
        ...

    def pause(self, node: str) -> None:
        """Freeze the node (SIGSTOP) until `resume`."""
        ...

    def resume(self, node: str) -> None: ...

    def stop(self, node: str) -> None:
        """Graceful stop; it stays down until `start`."""
        ...

    def start(self, node: str) -> None:
        """Start a stopped or killed node on its old ports and data; block until healthy."""
        ...

    def restart(self, node: str) -> None:
        """Graceful stop and start; block until healthy."""
        ...

    def memory_alarm(self, node: str, on: bool) -> None: ...

    def disk_alarm(self, node: str, on: bool) -> None: ...

    def is_up(self, node: str) -> bool:
        """Running and answering its health probe."""
        ...


def has_alarms(broker_kind: str) -> bool:
    """Memory and disk alarms can be raised on a running `broker_kind` node (False if unknown)."""
    facts = KINDS.get(broker_kind)
    return facts is not None and facts.alarms


def supported(fault: Any, broker_kind: str, backend: str = "local") -> str | None:
    """Why `fault` (a scenario fault) cannot run on `broker_kind` with `backend`, or None.

    Call it at run start-up for every scenario fault, so that a run never fails half-way.
    Client faults and consumer-group stochastic faults are the workload's; they pass here.
    """
    kind = getattr(fault, "kind", None)
    target = str(getattr(fault, "target", "broker"))
    if is_broker_fault(str(kind), target) and backend == "external":
        return (
            f"{kind} on {target!r}: the external backend does not own its brokers, so it cannot "
            "kill, pause, restart or alarm them (network faults via the proxy still work)"
        )
    facts = KINDS.get(broker_kind)
    if facts is None:
        return f"broker kind {broker_kind!r}: unknown (expected {kind_list(quote=True)})"
    if kind in _ALARMS and not facts.alarms:
        return (
            f"{kind}: not supported on {broker_kind} ({facts.no_alarms}); use a small "
            "broker.memory_limit to make producers block"
        )
    return None


class LocalBrokerFaults:
    """`BrokerFaults` on the nodes of a `Backend` that owns them (`LocalBackend`'s processes
    or `DockerBackend`'s containers; an `ExternalBackend` refuses with `NotOwnedError`)."""

    def __init__(
        self, backend: Backend, *, start_timeout: float = 90.0, ctl_timeout: float = 30.0
    ) -> None:
        self.backend = backend
        self.start_timeout = start_timeout
        self.ctl_timeout = ctl_timeout
        self._kinds: dict[str, str] = {}
        self._original: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def kind(self, node: str) -> str:
        if node not in self._kinds:
            for ep in self.backend.endpoints():
                self._kinds[ep.name] = ep.kind
        try:
            return self._kinds[node]
        except KeyError:
            known = sorted(self._kinds)
            raise FaultError(
                f"node {node!r} is not part of testbed {self.backend.home} (nodes: {known})"
            ) from None

    def prepare(self, node: str) -> None:
        if has_alarms(self.kind(node)):
            self._remember(node, "memory_alarm")
            self._remember(node, "disk_alarm")

    def kill(self, node: str) -> float | None:
        self.kind(node)
        return self.backend.kill_node(node)

    def pause(self, node: str) -> None:
        self.kind(node)
        self.backend.pause_node(node)

    def resume(self, node: str) -> None:
        self.kind(node)
        self.backend.resume_node(node)

    def stop(self, node: str) -> None:
        self.kind(node)
        self.backend.stop_node(node)

    def start(self, node: str) -> None:
        self.kind(node)
        self.backend.restart_node(node, timeout=self.start_timeout)

    def restart(self, node: str) -> None:
        self.kind(node)
        self.backend.restart_node(node, timeout=self.start_timeout)

    def is_up(self, node: str) -> bool:
        try:
            return self.backend.is_healthy(node)
        except MqbedError:
            return False

    # ----------------------------------------------------------------- alarms

    def memory_alarm(self, node: str, on: bool) -> None:
        self._alarm(node, "memory_alarm", on)

    def disk_alarm(self, node: str, on: bool) -> None:
        self._alarm(node, "disk_alarm", on)

    def _alarm(self, node: str, which: str, on: bool) -> None:
        kind = self.kind(node)
        if not has_alarms(kind):
            raise UnsupportedFault(f"{which} on node {node!r}: not supported on {kind}")
        original = self._remember(node, which)
        if which == "memory_alarm":
            if on:
                args = ["set_vm_memory_high_watermark", "absolute", "1"]
            else:
                match = _WATERMARK.match(original)
                assert match is not None  # checked by _remember
                absolute, relative = match.groups()
                args = ["set_vm_memory_high_watermark"]
                args += ["absolute", absolute] if absolute else [relative]
        else:
            args = ["set_disk_free_limit", _HUGE_DISK_LIMIT if on else original]
        self._ctl(node, *args)

    def _remember(self, node: str, which: str) -> str:
        """The watermark / disk limit in force before we changed it (read once per node)."""
        with self._lock:
            key = (node, which)
            if key not in self._original:
                if which == "memory_alarm":
                    value = self._ctl(
                        node, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."
                    )
                    if not _WATERMARK.match(value):
                        raise FaultError(f"node {node!r}: unexpected memory watermark {value!r}")
                else:
                    value = self._ctl(node, "eval", "rabbit_disk_monitor:get_disk_free_limit().")
                    if not value.isdigit():
                        raise FaultError(f"node {node!r}: unexpected disk free limit {value!r}")
                self._original[key] = value
            return self._original[key]

    def _ctl(self, node: str, *args: str) -> str:
        result = self.backend.rabbitmqctl(node, *args, timeout=self.ctl_timeout)
        if result.returncode != 0:
            raise FaultError(
                f"rabbitmqctl {' '.join(args)} on {node!r} failed (rc {result.returncode}): "
                f"{(result.stderr or result.stdout).strip()[-300:]}"
            )
        return result.stdout.strip()
