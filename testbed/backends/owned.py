"""The owned-node lifecycle that `LocalBackend` and `DockerBackend` share (`OwnedBackend`).

Both keep a testbed below a `home`: a state file (which nodes this testbed made, on which
ports, with which generated credentials) guarded by the home's lock, node directories whose
data goes on `down`, and nodes owned by this process (``up(detach=False)``) that go when it
exits — atexit, SIGTERM/SIGHUP (→ ``SystemExit``) and Ctrl-C. What differs (processes or
containers) is the subclass's: how a node is started, stopped, found running, probed and
released.

Also here: the checks of `up`'s arguments and what a new node record holds (credentials,
names, the memory formula), the same for both.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_ACTIVEMQ_MEMORY_MB",
    "KINDS",
    "Kind",
    "OwnedBackend",
    "await_all",
    "check_up_args",
    "fresh_record",
    "node_params",
    "wipe_node_state",
]

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import sys
import threading
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.node_driver import NotHealthy
from testbed.backends.state import HomeLock, NodeRecord, TestbedState
from testbed.backends.warm_up import WarmUp, warm_up
from testbed.core.broker_kinds import KINDS as REGISTERED
from testbed.core.broker_kinds import KindName
from testbed.exceptions import BackendError, ConfigurationError

Kind = KindName
KINDS: tuple[Kind, ...] = tuple(REGISTERED)  # type: ignore[arg-type]  # the registry's, in order
DEFAULT_ACTIVEMQ_MEMORY_MB = 256
"""ActiveMQ's memoryUsage limit when `up` is given no `memory_limit_mb`."""

_T = TypeVar("_T")


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


def wipe_node_state(node_dir: Path, subs: Sequence[str] = ("data", "tmp")) -> None:
    """Remove what a node wrote (`subs` of its directory), keeping the directory."""
    for sub in subs:
        shutil.rmtree(node_dir / sub, ignore_errors=True)


def node_params(kind: Kind, testbed: str, name: str, memory_mb: int | None) -> dict[str, Any]:
    """The per-kind parameters of a new node `name` of testbed id `testbed`: RabbitMQ's Erlang
    node name and optional absolute watermark (`memory_mb`); ActiveMQ's broker name, memory
    limit (`memory_mb`, default 256 MB) and JVM heap (twice that, at least 512 MB)."""
    params: dict[str, Any] = {"memory_limit_mb": memory_mb}
    if kind == "rabbitmq":
        params["erlang_node"] = f"mqbed-{testbed}-{name}@localhost"
    else:
        mem = memory_mb or DEFAULT_ACTIVEMQ_MEMORY_MB
        params.update(
            memory_limit_mb=mem, heap_mb=max(512, 2 * mem), broker_name=f"mqbed-{testbed}-{name}"
        )
    return params


def fresh_record(
    name: str, kind: Kind, node_dir: Path, *, detach: bool, params: dict[str, Any]
) -> NodeRecord:
    """A node record with newly generated credentials (not started, no ports yet)."""
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


def await_all(wait: Callable[[NodeRecord], _T], recs: Sequence[NodeRecord]) -> list[_T]:
    """`wait(rec)` for every record at once (one thread each); the results in order, or the
    first error (in the order of `recs`) once every wait has ended."""
    with ThreadPoolExecutor(len(recs), thread_name_prefix="mqbed-health") as pool:
        futures = [pool.submit(wait, r) for r in recs]
        errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


class OwnedBackend(Backend):
    """A `Backend` whose nodes mqbed makes and owns, recorded in ``home/<state_file>``."""

    _NO_STATE: ClassVar[str] = "no testbed running in"
    """The start of the `BackendError` message when the home has no state file."""
    _RUNNING: ClassVar[str] = "node(s) already running"
    _DOWN: ClassVar[str] = "mqbed down"
    """What `up` says runs, and which command stops it, when a kind runs with other nodes."""

    home: Path

    def __init__(self, home: Path | str, state_file: str) -> None:
        self.home = Path(home).expanduser().resolve()
        self.state_path = self.home / state_file
        self.startup_seconds: dict[str, float] = {}
        """Seconds from launch to healthy of each node started by this object (last start)."""
        self.warmed: dict[str, WarmUp] = {}
        """The warm-up of each node started by this object (`testbed.backends.warm_up`)."""
        self._lock = HomeLock(self.home)
        self._cleanup_installed = False

    # ----------------------------------------------------------------- what subclasses do

    @abstractmethod
    def _running(self, rec: NodeRecord) -> bool:
        """Whether the node's process or container runs."""

    @abstractmethod
    def _probe(self, rec: NodeRecord, timeout: float) -> None:
        """The node's health probe: `NotHealthy` unless it answers within `timeout` s."""

    @abstractmethod
    def _release(self, state: TestbedState, recs: list[NodeRecord]) -> None:
        """Stop (and remove) the nodes `recs` this process owns, at its exit."""

    def _discard_stale(self, recs: list[NodeRecord]) -> None:
        """What is left of recorded nodes none of which runs (before their records go)."""

    # ----------------------------------------------------------------- Backend

    def is_healthy(self, name: str, timeout: float = 2.0) -> bool:
        """Whether the node runs (a paused container does not) and answers its health probe
        within `timeout` s."""
        rec = self._state().node(name)
        if not self._running(rec):
            return False
        try:
            self._probe(rec, timeout)
        except NotHealthy:
            return False
        return True

    # ----------------------------------------------------------------- state

    def _load(self) -> TestbedState | None:
        return TestbedState.load(self.state_path)

    def _state(self) -> TestbedState:
        state = self._load()
        if state is None:
            raise BackendError(f"{self._NO_STATE} {self.home} (no {self.state_path})")
        return state

    @contextlib.contextmanager
    def _locked_state(self) -> Iterator[TestbedState]:
        """The state, read under the home lock (`BackendError` when there is no testbed)."""
        self._state()  # fail before creating a lock file in a home that has no testbed
        with self._lock:
            yield self._state()

    def _reusable(self, state: TestbedState, kind: Kind, nodes: int) -> bool:
        """Whether `kind`'s recorded nodes all run and are `nodes`; records of which none
        runs are forgotten (False); `BackendError` when some run, or a different number."""
        recs = [r for r in state.nodes if r.kind == kind]
        alive = [r for r in recs if self._running(r)]
        if not alive:
            self._discard_stale(recs)
            state.nodes = [r for r in state.nodes if r.kind != kind]  # stale records: forget
            return False
        if len(alive) == len(recs) == nodes:
            return True
        raise BackendError(
            f"testbed {self.home}: {len(alive)} of {len(recs)} {kind} {self._RUNNING} "
            f"(asked for {nodes}); run `{self._DOWN}` first"
        )

    def _forget(self, state: TestbedState, recs: list[NodeRecord]) -> None:
        """Drop `recs` from the state; save it, or remove the file when nothing is left."""
        state.nodes = [r for r in state.nodes if r not in recs]
        if state.nodes or state.epmd:
            state.save(self.state_path)
        else:
            self.state_path.unlink(missing_ok=True)

    def _warm(self, endpoints: Sequence[BrokerEndpoint]) -> None:
        """Warm up the brokers this object has just started, one by one (a kind that needs
        none returns at once)."""
        for endpoint in endpoints:
            done = warm_up(endpoint)
            if done.sent:
                self.warmed[endpoint.name] = done

    def _record_startup(self, rec: NodeRecord, seconds: float) -> None:
        rec.startup_seconds = round(seconds, 3)
        self.startup_seconds[rec.name] = rec.startup_seconds

    def _wipe_data(self, state: TestbedState) -> None:
        """`down` without `keep_data`: every node's data goes, its logs stay."""
        for rec in state.nodes:
            wipe_node_state(Path(rec.node_dir))

    # ----------------------------------------------------------------- ownership

    def _install_cleanup(self) -> None:
        """Once per object: release the owned nodes at exit, SIGTERM/SIGHUP exiting."""
        if self._cleanup_installed:
            return
        self._cleanup_installed = True
        atexit.register(self._release_owned)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) == signal.SIG_DFL:
                    signal.signal(sig, exit_on_signal)

    def _release_owned(self) -> None:
        """atexit: stop the nodes this process owns (all of them → a full `down`)."""
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
                self._release(state, mine)
                state.nodes = [r for r in state.nodes if r not in mine]
                state.save(self.state_path)
        except Exception as exc:  # at exit there is nobody left to raise to
            print(f"mqbed: cleanup of {self.home} failed: {exc}", file=sys.stderr)


def exit_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP handler: exit (128 + signal) so that atexit releases owned nodes."""
    raise SystemExit(128 + signum)
