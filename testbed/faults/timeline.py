"""The fault timeline of a live run: `FaultRunner` executes the scenario's `faults:` on one clock.

The episodes come from `testbed.core.faultplan.plan_faults` (pure and seeded, so the simulator
plans the same ones). The runner executes them in background threads — one per scenario
fault, so a slow broker restart never delays another fault — and records each start and end as
``events`` rows:

- ``fault_start`` / ``fault_end``, target = the scenario's target (``broker``, ``broker1``,
  ``consumers``, ...); detail: ``kind`` (the fault kind, the key the workload's client-crash
  rows use too), ``index`` (in the scenario list), ``episode``, ``node`` or ``links`` and
  ``toxics``, ``params``, ``scheduled`` time, ``action_s`` / ``heal_s``, and on the end
  ``rolled_back`` (`stop` cut it short) and ``clipped`` (healed at `stop_at`);
- ``broker_down`` / ``broker_up`` for process faults (kill, pause, restart, stochastic);
- ``fault_error`` when an action failed (the run goes on; `FaultRunner.errors` lists them).

A row's time is when the action *took effect* on the run clock (SIGKILL/SIGSTOP delivered,
toxic added, ``rabbitmqctl`` returned, broker healthy again); ``action_s``/``heal_s`` say how
long the action took. For ``broker_kill`` the outage ``fault_start.t .. fault_end.t`` is
``duration`` plus the broker's start-up time (~5–7 s for RabbitMQ, ~1–2 s for ActiveMQ).

`stop()` always rolls back, bounded in time: every fault in force is healed (toxics removed,
paused broker continued, killed or stopped broker started, alarm cleared) — also at interpreter
exit (atexit) when the owner never called it.
"""

from __future__ import annotations

__all__ = [
    "Clock",
    "EventSink",
    "ProxyControl",
    "FaultRunner",
    "proxied_endpoints",
]

import atexit
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from testbed.backends.base import BrokerEndpoint
from testbed.core.broker_kinds import DEFAULT_KIND
from testbed.core.faultplan import Episode, episode_detail, plan_faults
from testbed.exceptions import FaultError
from testbed.faults.injector import BrokerFaults, has_alarms
from testbed.faults.schedule import check_faults, links_for
from testbed.faults.toxic_spec import NotFoundError

log = logging.getLogger(__name__)


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the workload start (t=0)."""
        ...


class EventSink(Protocol):
    def event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None: ...


class ProxyControl(Protocol):
    """What the runner needs of a proxy: `FaultProxy` or `ProxyClient`."""

    def add_toxic(self, link: str, toxic: dict[str, Any]) -> dict[str, Any]: ...

    def remove_toxic(self, link: str, name: str) -> None: ...


class LinkMaker(Protocol):
    def add_link(
        self, name: str, upstream_host: str, upstream_port: int, listen_port: int = 0
    ) -> int: ...


def proxied_endpoints(
    proxy: LinkMaker,
    endpoint: BrokerEndpoint,
    sides: Sequence[str] = ("producers", "consumers"),
) -> tuple[dict[str, list[str]], dict[str, BrokerEndpoint]]:
    """One proxy link per side to `endpoint` (named ``<side>-<node>``); returns the `links`
    mapping `FaultRunner` takes and the endpoint each side's clients connect to."""
    links: dict[str, list[str]] = {}
    endpoints: dict[str, BrokerEndpoint] = {}
    for side in sides:
        name = f"{side}-{endpoint.name}"
        port = proxy.add_link(name, endpoint.host, endpoint.port)
        links[side] = [name]
        endpoints[side] = dataclasses.replace(endpoint, port=port)
    return links, endpoints


class FaultRunner:
    """Runs a fault timeline in background threads; `stop()` heals whatever is in force."""

    def __init__(
        self,
        faults: Sequence[Any],
        *,
        clock: Clock,
        recorder: EventSink | None,
        brokers: BrokerFaults | None = None,
        node_names: Mapping[str, str] | None = None,
        proxy: ProxyControl | None = None,
        links: Mapping[str, Sequence[str]] | None = None,
        seed: int = 0,
        stop_at: float | None = None,
        broker_kind: str | None = None,
    ) -> None:
        """Validate everything up front: raises `FaultError` listing every problem.

        `node_names`: scenario target → node (``{"broker": "rabbitmq0", "broker0":
        "rabbitmq0"}``); `links`: side → proxy link names (``{"producers": [...],
        "consumers": [...]}``; ``all`` defaults to both). `broker_kind` defaults to the kind of
        the first node (asked of `brokers`).
        """
        self.clock = clock
        self.recorder = recorder
        self.brokers = brokers
        self.node_names = dict(node_names or {})
        self.proxy = proxy
        self.links = {k: list(v) for k, v in (links or {}).items()}
        self.episodes = plan_faults(faults, seed=seed, stop_at=stop_at, node_names=self.node_names)
        self.events: list[tuple[float, str, str, dict[str, Any]]] = []
        """Every row recorded, in recording order (also sent to `recorder`)."""
        self.errors: list[str] = []
        needs_brokers = any(e.action != "network" for e in self.episodes)
        if broker_kind is None and brokers is not None and self.node_names:
            broker_kind = brokers.kind(next(iter(self.node_names.values())))
        problems = check_faults(
            faults,
            broker_kind=broker_kind or DEFAULT_KIND,
            node_names=self.node_names,
            links=self.links if proxy is not None else None,
        )
        if needs_brokers and brokers is None:
            problems.append("broker faults need a BrokerFaults implementation (brokers=None)")
        for ep in self.episodes:
            node = self.node_names.get(ep.target)
            if brokers is not None and node and ep.action in ("memory_alarm", "disk_alarm"):
                kind = brokers.kind(node)
                if not has_alarms(kind):
                    problems.append(
                        f"faults[{ep.index}] ({ep.fault}): not supported on node {node!r} "
                        f"({kind} reads its memory/store limits at start-up only)"
                    )
        if problems:
            raise FaultError("fault timeline cannot run:\n  " + "\n  ".join(problems))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._node_locks = {n: threading.Lock() for n in set(self.node_names.values())}
        self._active: dict[tuple[int, int], tuple[Episode, Callable[[], None]]] = {}
        self._threads: list[threading.Thread] = []
        self._threads_by_index: dict[int, threading.Thread] = {}
        self._started = False

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FaultRunner:
        """Start one thread per scenario fault; returns self."""
        if self._started:
            return self
        self._started = True
        tracks: dict[int, list[Episode]] = {}
        for ep in self.episodes:
            tracks.setdefault(ep.index, []).append(ep)
        for index, eps in tracks.items():
            thread = threading.Thread(
                target=self._track, args=(eps,), name=f"mqbed-fault-{index}", daemon=True
            )
            self._threads.append(thread)
            self._threads_by_index[index] = thread
            thread.start()
        atexit.register(self.stop)
        return self

    def stop(self, timeout: float = 150.0) -> None:
        """Stop the timeline and heal every fault in force; waits at most ~`timeout` s.

        Heals run in the fault threads (a kill's heal is a broker start, ~5–7 s); what is still
        in force after they end is healed here once more. Never raises; failures are logged,
        recorded as ``fault_error`` and listed in `errors`.
        """
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            self._error("stop", "runner", f"threads still busy after {timeout} s: {stuck}")
        with self._lock:
            leftovers = list(self._active.items())
        for key, (ep, heal) in leftovers:
            if self._threads_by_index[ep.index].is_alive():
                continue  # its own thread is still healing it
            try:
                heal()
                with self._lock:
                    self._active.pop(key, None)
            except Exception as exc:
                self._error("rollback", ep.target, f"{ep.fault}: {exc}")
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __enter__(self) -> FaultRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def active(self) -> list[Episode]:
        """Episodes in force now."""
        with self._lock:
            return [ep for ep, _ in self._active.values()]

    # ----------------------------------------------------------------- one fault

    def _sleep_until(self, t: float) -> bool:
        """Wait until run time `t`; False if `stop` came first."""
        while not self._stop.is_set():
            remaining = t - self.clock.now()
            if remaining <= 0:
                return True
            self._stop.wait(min(remaining, 1.0))
        return False

    def _track(self, episodes: list[Episode]) -> None:
        if episodes[0].action in ("memory_alarm", "disk_alarm"):
            node = self.node_names[episodes[0].target]
            try:
                assert self.brokers is not None
                self.brokers.prepare(node)
            except Exception as exc:
                self._error("prepare", episodes[0].target, f"{episodes[0].fault}: {exc}")
        for ep in episodes:
            if not self._sleep_until(ep.start):
                return
            heal = self._begin(ep)
            if heal is None:
                continue
            key = (ep.index, ep.episode)
            with self._lock:
                self._active[key] = (ep, heal)
            self._sleep_until(ep.end)
            try:
                heal()
            except Exception as exc:
                self._error("end", ep.target, f"{ep.fault}: {exc}")
                continue  # stays in _active: stop() tries again
            with self._lock:
                self._active.pop(key, None)

    def _begin(self, ep: Episode) -> Callable[[], None] | None:
        """Inject `ep`; returns the healing callable (None if injecting failed)."""
        try:
            if ep.action == "network":
                undo, more = self._inject_network(ep)
            else:
                undo, more = self._inject_broker(ep)
        except Exception as exc:
            self._error("start", ep.target, f"{ep.fault}: {exc}")
            return None
        detail = {**episode_detail(ep), **more}
        healed = threading.Event()

        def heal() -> None:
            if healed.is_set():
                return
            t0 = time.monotonic()
            undo()
            healed.set()
            end = dict(detail, heal_s=round(time.monotonic() - t0, 3))
            end.update(rolled_back=self._stop.is_set(), clipped=ep.clipped)
            now = self.clock.now()
            end["scheduled"] = round(ep.end, 6)
            self._record(now, "fault_end", ep.target, end)
            if ep.action in ("kill", "pause", "restart"):
                self._record(
                    now, "broker_up", ep.target, {"node": detail["node"], "kind": ep.fault}
                )

        return heal

    def _inject_network(self, ep: Episode) -> tuple[Callable[[], None], dict[str, Any]]:
        assert self.proxy is not None
        proxy = self.proxy
        names = links_for(ep.target, self.links)
        toxics = list(ep.toxics)
        added: list[tuple[str, str]] = []
        t0 = time.monotonic()
        try:
            for link in names:
                for toxic in toxics:
                    proxy.add_toxic(link, toxic)
                    added.append((link, toxic["name"]))
        except Exception:
            _remove_toxics(proxy, added)
            raise
        more = {"links": names, "toxics": [t["name"] for t in toxics]}
        self._record(
            self.clock.now(),
            "fault_start",
            ep.target,
            {**episode_detail(ep), **more, "action_s": round(time.monotonic() - t0, 3)},
        )
        return (lambda: _remove_toxics(proxy, added)), more

    def _inject_broker(self, ep: Episode) -> tuple[Callable[[], None], dict[str, Any]]:
        assert self.brokers is not None
        b = self.brokers
        node = self.node_names[ep.target]
        do: Callable[[], float | None]
        undo: Callable[[], None]
        if ep.action == "kill":
            do, undo = (lambda: b.kill(node)), (lambda: b.start(node))
        elif ep.action == "pause":
            do, undo = (lambda: b.pause(node)), (lambda: b.resume(node))
        elif ep.action == "restart":
            do, undo = (lambda: b.stop(node)), (lambda: b.start(node))
        elif ep.action == "memory_alarm":
            do, undo = (lambda: b.memory_alarm(node, True)), (lambda: b.memory_alarm(node, False))
        else:
            do, undo = (lambda: b.disk_alarm(node, True)), (lambda: b.disk_alarm(node, False))
        lock = self._node_locks[node]
        t0 = time.monotonic()
        with lock:
            took = do()
        now = self.clock.now()
        more = {"node": node}
        start = {**episode_detail(ep), **more, "action_s": round(time.monotonic() - t0, 3)}
        if ep.action == "kill" and isinstance(took, float):  # the signal: `now - teardown_s`
            start["teardown_s"] = round(took, 4)
        self._record(now, "fault_start", ep.target, start)
        if ep.action in ("kill", "pause", "restart"):
            self._record(now, "broker_down", ep.target, {"node": node, "kind": ep.fault})

        def locked_undo() -> None:
            with lock:
                undo()

        return locked_undo, more

    # ----------------------------------------------------------------- records

    def _record(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None:
        with self._lock:
            self.events.append((t, kind, target, detail))
            if self.recorder is not None:
                try:
                    self.recorder.event(t, kind, target, detail)
                except Exception:  # recording must never stop the healing
                    log.exception("recording %s %s failed", kind, target)

    def _error(self, phase: str, target: str, message: str) -> None:
        log.error("fault %s on %s: %s", phase, target, message)
        with self._lock:
            self.errors.append(f"{phase} {target}: {message}")
        self._record(self.clock.now(), "fault_error", target, {"phase": phase, "error": message})


def _remove_toxics(proxy: ProxyControl, added: list[tuple[str, str]]) -> None:
    errors = []
    for link, name in added:
        try:
            proxy.remove_toxic(link, name)
        except NotFoundError:
            pass
        except Exception as exc:
            errors.append(f"{link}/{name}: {exc}")
    if errors:
        raise FaultError("could not remove toxics " + "; ".join(errors))
