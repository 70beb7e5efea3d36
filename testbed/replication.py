"""One live replication of a scenario on a ready broker.

The steps, each its own function: `_start_parts` (the run clock, the worker configuration, the
recorders, the broker sampler, the autoscaler, Locust and the fault runner), `_drain_loop` (the
progress line until the queues are empty or the drain times out) and `_stop_parts` (stops every
part, shielded from signals, whatever ended the loop). The run pipeline around it (provision,
collect, predict) is `testbed.run`.
"""

from __future__ import annotations

__all__ = [
    "EXTERNAL_READY_WAIT",
    "INTERRUPTED_STOP",
    "STARTUP_MARGIN",
    "ReplicationSpec",
    "run_replication",
]

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live

from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.provision import node_names
from testbed.backends.run_homes import RunHome
from testbed.core.clock import RunClock
from testbed.core.phases import PHASE, phase_marks
from testbed.core.scenario import Scenario
from testbed.core.seeds import replication_seed
from testbed.exceptions import MqbedError
from testbed.faults.injector import LocalBrokerFaults
from testbed.faults.proxy import FaultProxy
from testbed.faults.schedule import needs_proxy
from testbed.faults.timeline import FaultRunner, proxied_endpoints
from testbed.interrupts import INTERRUPTS
from testbed.observe.exporter import ExportingPoller, PrometheusExporter, exporter_from_env
from testbed.observe.recorder import Listener, Recorder
from testbed.observe.stats import StatsPoller, make_stats_poller
from testbed.observe.timeseries import TimeseriesSampler
from testbed.workload.config import T0_PENDING, WorkerConfig, ready_marker
from testbed.workload.launcher import EXPECT_WORKERS_WAIT, LocustLauncher
from testbed.workload.scaling import CONTROL_KEY, user_count
from testbed.workload.topology import all_queue_names, parked_queue_names

if TYPE_CHECKING:
    from testbed.control.autoscaler import LiveAutoscaler

STARTUP_MARGIN = 3.0
"""Least seconds between launching Locust and t=0 in a scenario with faults.

The topology is declared before the launch, so a fault at t=0 comes ≥ 3 s after the
declaration: RabbitMQ 3.10 can lose a durable queue (and its confirmed messages) killed within
~2 s of its declaration (tests/integration/faultkit.py, DURABLE_SETTLE_S)."""
READY_MARGIN = 1.0
"""Seconds between the last Locust process being ready and t=0 (plus 20 ms per user): its
other users spawn (all within a second, the spawn rate being the user count) and connect."""
LOCAL_READY_WAIT = 30.0
"""Seconds a run waits for its own Locust processes to be ready before it gives up."""
EXTERNAL_READY_WAIT = EXPECT_WORKERS_WAIT + 30.0
"""Seconds a run waits for all its external workers to be ready before it gives up."""
INTERRUPTED_STOP = 6.0
"""Seconds Locust gets to stop after a signal interrupted the run (30 s at a normal end)."""


@dataclass(frozen=True)
class ReplicationSpec:
    """What one live replication runs: the scenario, on which broker, where it records."""

    scenario: Scenario
    endpoint: BrokerEndpoint
    run_dir: Path
    rep: int
    entry: RunHome
    """The run's home: tracks Locust's processes and holds the credentials file."""
    backend: Backend | None = None
    """The backend owning the brokers this run started (broker faults need it), else None."""
    workers: int = 1
    ui: bool = False
    external: tuple[int, Path] | None = None
    """External Locust workers: how many, and the rendezvous file they watch."""

    @property
    def measured(self) -> Path:
        return self.run_dir / "measured"

    @property
    def seed(self) -> int:
        return replication_seed(self.scenario.seed, self.rep)


@dataclass
class _Parts:
    """The running parts of one replication (None: not part of this scenario)."""

    clock: RunClock
    locust: LocustLauncher
    sampler: TimeseriesSampler
    control: Recorder
    runner: FaultRunner | None = None
    fault_rec: Recorder | None = None
    proxy: FaultProxy | None = None
    scaler: LiveAutoscaler | None = None
    exporter: PrometheusExporter | None = None


def run_replication(spec: ReplicationSpec, console: Console) -> list[str]:
    """One live replication; returns the fault runner's errors (empty when all went well)."""
    parts = _start_parts(spec)
    if parts.locust.web_url:
        console.print(f"Locust web UI: {parts.locust.web_url}", markup=False)
    try:
        _drain_loop(spec.scenario, parts, console)
    finally:
        errors = _stop_parts(parts)
        if note := parts.locust.unfinished_note():
            console.print(note, markup=False)
    return errors


def _start_parts(spec: ReplicationSpec) -> _Parts:
    """Build every part of the replication, then start the fault runner (if any), the
    sampler, the autoscaler (if any) and Locust, and track Locust's processes.

    Locust starts first, its workers told that t=0 is pending; t=0 is fixed once each Locust
    process running users is ready (`_await_ready`), `READY_MARGIN` later (with faults, never
    before `STARTUP_MARGIN` after the launch). A process that imports slowly (a busy machine,
    an external worker on another host) so delays the start, never the load; on an idle
    machine a run starts ~2.5 s after the launch instead of waiting a fixed 5 s."""
    scenario, rep, measured = spec.scenario, spec.rep, spec.measured
    users = user_count(scenario)  # a scaled group has one user per slot
    proxy = (
        FaultProxy(seed=spec.seed, api_port=None).start() if needs_proxy(scenario.faults) else None
    )
    links: dict[str, list[str]] = {}
    client_eps: dict[str, BrokerEndpoint] = {}
    if proxy is not None:
        links, client_eps = proxied_endpoints(proxy, spec.endpoint)
    config_path = spec.run_dir / f"worker-config.r{rep}.json"
    secrets = spec.entry.secrets_path(rep)
    tail = scenario.duration + scenario.drain_timeout + 5
    wait = EXTERNAL_READY_WAIT if spec.external else LOCAL_READY_WAIT
    margin = READY_MARGIN + 0.02 * users
    _worker_config(spec, client_eps, T0_PENDING).write(config_path, secrets=secrets)
    locust = _launcher(spec, config_path, users, wait + STARTUP_MARGIN + margin + tail)
    launched = time.monotonic()
    locust.start(f"r{rep}")
    spec.entry.track(locust.refs())
    try:
        _await_ready(spec, locust, config_path, users, wait)
    except BaseException:
        locust.stop(timeout=INTERRUPTED_STOP)
        if proxy is not None:
            proxy.stop()
        raise
    floor = STARTUP_MARGIN if scenario.faults else 0.0
    lead = max(margin, floor - (time.monotonic() - launched))
    t0_ns = time.time_ns() + int(lead * 1e9)
    clock = RunClock(t0_ns)
    config = _worker_config(spec, client_eps, t0_ns)
    config.write(config_path, secrets=secrets)  # t=0 fixed: the waiting users go at t=0
    for slot in _ready_slots(spec):
        ready_marker(config_path, slot).unlink(missing_ok=True)
    # Prometheus exporter of this process (MQBED_PROMETHEUS_SD_DIR set, e.g. by `mqbed up
    # --with-prometheus` or compose): run events, fault events and the broker poller's gauges
    exporter = exporter_from_env(f"control-r{rep}", run_id=spec.run_dir.name)
    listeners: list[Listener] = [exporter] if exporter is not None else []
    control = Recorder(measured, f"control-r{rep}", rep, batch_rows=1, listeners=listeners)
    sampler = _sampler(spec, clock, exporter)
    scaler = _autoscaler(spec, clock, config)
    runner, fault_rec = None, None
    if scenario.faults and (proxy is not None or spec.backend is not None):
        runner, fault_rec = _start_fault_runner(spec, clock, proxy, links, listeners)
    sampler.start()
    if scaler is not None:
        scaler.start()
    return _Parts(
        clock=clock,
        locust=locust,
        sampler=sampler,
        control=control,
        runner=runner,
        fault_rec=fault_rec,
        proxy=proxy,
        scaler=scaler,
        exporter=exporter,
    )


def _launcher(spec: ReplicationSpec, config: Path, users: int, run_time: float) -> LocustLauncher:
    return LocustLauncher(config, spec.measured / "locust", users, run_time,
                          spec.workers, spec.ui,
                          external_workers=spec.external[0] if spec.external else 0,
                          rendezvous=spec.external[1] if spec.external else None,
                          secrets=spec.entry.secrets_path(spec.rep))  # fmt: skip


def _ready_slots(spec: ReplicationSpec) -> list[int]:
    """The worker indices whose processes can run users, so leave a ready marker: the external
    workers, or this run's own processes (a single one, or the workers but not the master)."""
    if spec.external:
        return list(range(1, spec.external[0] + 1))
    if spec.workers <= 1:
        return [0]
    return list(range(1, spec.workers + 1))


def _await_ready(
    spec: ReplicationSpec, locust: LocustLauncher, config_path: Path, users: int, wait: float
) -> None:
    """Wait (at most `wait` s) until each Locust process that runs users (`_ready_slots`, never
    more of this run's own than users) has left its ready marker beside the configuration
    (`testbed.workload.config.ready_marker`). Raise naming how many came."""
    expected = _ready_slots(spec)
    need = len(expected) if spec.external else min(len(expected), users)
    deadline = time.monotonic() + wait
    while need > 0:
        ready = [i for i in expected if ready_marker(config_path, i).exists()]
        if len(ready) >= need:
            return
        locust.check_started()
        if not locust.alive() or time.monotonic() > deadline:
            if spec.external:
                raise MqbedError(
                    f"{len(ready)} of {need} external Locust workers ready (slots "
                    f"{ready or '-'}) after {wait:g} s: are the worker services running and "
                    f"watching {locust.rendezvous}? (compose: --profile distributed up -d "
                    f"--scale locust-worker={need})"
                )
            raise MqbedError(
                f"{len(ready)} of {need} Locust processes ready after {wait:g} s (a process "
                f"is ready when its first user starts): see their logs in {locust.out_dir}"
            )
        time.sleep(0.05)


def _worker_config(
    spec: ReplicationSpec, client_eps: dict[str, BrokerEndpoint], t0_ns: int
) -> WorkerConfig:
    """What every Locust worker of the replication reads: scenario, endpoints, t=0, seed."""
    scenario, rep, run_dir = spec.scenario, spec.rep, spec.run_dir
    return WorkerConfig(
        scenario_file=str(run_dir / "scenario.yaml"),
        measured_dir=str(spec.measured),
        endpoint=client_eps.get("producers", spec.endpoint).to_json(),
        consumer_endpoint=client_eps["consumers"].to_json() if "consumers" in client_eps else None,
        t0_ns=t0_ns,
        replication=rep,
        seed=spec.seed,
        run_id=run_dir.name,
        stop_producers_at=scenario.duration,
        extra={CONTROL_KEY: str(run_dir / f"scale-control.r{rep}.json")}
        if scenario.autoscaling
        else {},
    )


def _sampler(
    spec: ReplicationSpec, clock: RunClock, exporter: PrometheusExporter | None
) -> TimeseriesSampler:
    """The broker's queue statistics, polled into the time series (and the exporter)."""
    queues = all_queue_names(spec.scenario)
    poller: StatsPoller = make_stats_poller(spec.endpoint, queues=queues)
    if exporter is not None:
        poller = ExportingPoller(poller, exporter)
    return TimeseriesSampler(
        poller,
        clock,
        spec.measured,
        queues,
        spec.rep,
        spec.scenario.recording.poll_interval,
    )


def _autoscaler(
    spec: ReplicationSpec, clock: RunClock, config: WorkerConfig
) -> LiveAutoscaler | None:
    """The live autoscaling loop of one replication (None without `autoscaling:`)."""
    scenario = spec.scenario
    if not scenario.autoscaling:
        return None
    from testbed.control.autoscaler import LiveAutoscaler

    return LiveAutoscaler(
        scenario,
        make_stats_poller(spec.endpoint, queues=all_queue_names(scenario)),
        clock,
        Recorder(spec.measured, f"autoscale-r{spec.rep}", spec.rep, batch_rows=1),
        Path(config.extra[CONTROL_KEY]),
    )


def _start_fault_runner(
    spec: ReplicationSpec,
    clock: RunClock,
    proxy: FaultProxy | None,
    links: dict[str, list[str]],
    listeners: list[Listener],
) -> tuple[FaultRunner, Recorder]:
    """Start the scenario's fault timeline (proxy links and/or local brokers) and its recorder."""
    scenario, rep = spec.scenario, spec.rep
    fault_rec = Recorder(spec.measured, f"faults-r{rep}", rep, batch_rows=1, listeners=listeners)
    runner = FaultRunner(
        scenario.faults,
        clock=clock,
        recorder=fault_rec,
        brokers=LocalBrokerFaults(spec.backend) if spec.backend is not None else None,
        node_names=node_names(scenario),
        proxy=proxy,
        links=links,
        seed=spec.seed,
        stop_at=scenario.duration,
        broker_kind=scenario.broker.kind,
    ).start()
    return runner, fault_rec


def _phase(t: float, scenario: Scenario) -> str:
    if t < scenario.warmup:
        return "warmup" if t >= 0 else "start"
    if t < scenario.duration:
        return "load"
    return "drain"


def _drain_loop(scenario: Scenario, parts: _Parts, console: Console) -> None:
    """Record the phases, show the progress line, and return once the drain is over: two
    successive polls after the load find the broker up and every queue empty (but a dead-letter
    queue nobody reads, `parked_queue_names`), or the drain times out, or Locust died."""
    control, clock, sampler, locust = parts.control, parts.clock, parts.sampler, parts.locust
    parked = parked_queue_names(scenario)
    for t, name in phase_marks(scenario.warmup, scenario.duration):
        until = {"until": scenario.warmup} if name == "warmup" else {}
        control.event(t, PHASE, "run", {"phase": name, **until})
    empty_polls = 0
    last_poll = 0
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while True:
            time.sleep(0.1)
            t = clock.now()
            locust.check_started()
            phase = _phase(t, scenario)
            live.update(_progress(phase, t, scenario, sampler))
            latest = sampler.latest
            if phase != "drain" or latest.polls == last_poll:
                continue
            last_poll = latest.polls
            depth = sum(n for q, n in latest.per_queue.items() if q not in parked)
            if latest.t > scenario.duration + 0.5 and latest.broker_up and depth == 0:
                empty_polls += 1
                if empty_polls >= 2:
                    break
            else:
                empty_polls = 0
            if t >= scenario.duration + scenario.drain_timeout or not locust.alive():
                control.event(t, "drain_timeout", "run", {"depth": latest.per_queue})
                break
    control.event(clock.now(), PHASE, "run", {"phase": "end"})


def _progress(phase: str, t: float, scenario: Scenario, sampler: TimeseriesSampler) -> str:
    s = sampler.latest
    end = scenario.duration
    remaining = (
        max(0.0, end - t) if phase != "drain" else max(0.0, end + scenario.drain_timeout - t)
    )
    return (
        f"[bold]{phase:7}[/] t={t:6.1f}s remaining {remaining:5.1f}s | "
        f"in {s.publish_rate:8.1f}/s out {s.deliver_rate:8.1f}/s | depth {s.depth:6d} | "
        f"consumers {s.consumers}"
    )


def _stop_parts(parts: _Parts) -> list[str]:
    """Stop every part, shielded from further signals; the fault runner's errors.

    Locust gets 30 s to stop, or `INTERRUPTED_STOP` when a signal interrupted the run."""
    with INTERRUPTS.shielded():
        parts.locust.stop(timeout=INTERRUPTED_STOP if INTERRUPTS.pending else 30.0)
        errors: list[str] = []
        if parts.runner is not None:
            parts.runner.stop()  # always heals: proxy, paused or killed broker, alarms
            errors = list(parts.runner.errors)
        if parts.fault_rec is not None:
            parts.fault_rec.close()
        if parts.proxy is not None:
            parts.proxy.stop()
        if parts.scaler is not None:
            parts.scaler.stop()
        parts.sampler.stop()
        parts.control.close()
        if parts.exporter is not None:
            parts.exporter.close()
    return errors
