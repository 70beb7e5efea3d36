"""The run pipeline: provision -> warm up -> load -> drain -> collect -> predict -> report.

Interruptions (Ctrl-C, a crash, SIGTERM, SIGHUP) still leave a readable run directory: records
are flushed in batches while running, and the `finally` path stops Locust by process group,
merges whatever parts exist, writes the ledger and `environment.json` (``"interrupted": true``),
and stops the brokers this run started (`testbed.interrupts`: exit 130, 143, 129). A SIGKILLed
run leaves ``environment.json`` as written at the start (``"interrupted": true``), the parts
flushed so far, and its home ``<home>/runs/<run_id>/`` for `mqbed down` to clean.

No broker password is written under the run directory: the scenario copy is redacted
(`testbed.core.redact`), Locust processes read the credentials from a 0600 file in the run's
home (`testbed.backends.run_homes`), removed when the replication ends.
"""

from __future__ import annotations

__all__ = ["run_scenario", "RunResult"]

import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.live import Live

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.backends.provision import node_names, provisioned
from testbed.backends.run_homes import RunHome, run_home
from testbed.brokers import make_adapter
from testbed.calibration.choice import ProfileChoice, choose_profile
from testbed.calibration.client_path import Replicate
from testbed.core.clock import RunClock
from testbed.core.records import Ledger
from testbed.core.redact import redact_text, url_passwords
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario, validate_file
from testbed.core.seeds import replication_seed
from testbed.exceptions import ConfigurationError, MqbedError
from testbed.faults.injector import LocalBrokerFaults
from testbed.faults.proxy import FaultProxy
from testbed.faults.schedule import check_faults, needs_proxy
from testbed.faults.timeline import FaultRunner, proxied_endpoints
from testbed.interrupts import INTERRUPTS, RunInterrupted, interruptible
from testbed.observe.environment import environment
from testbed.observe.exporter import ExportingPoller, exporter_from_env
from testbed.observe.ledger import collect_side, user_errors
from testbed.observe.recorder import Recorder
from testbed.observe.stats import StatsPoller, make_stats_poller
from testbed.observe.timeseries import TimeseriesSampler
from testbed.workload.config import WorkerConfig
from testbed.workload.launcher import LocustLauncher
from testbed.workload.scaling import CONTROL_KEY, user_count
from testbed.workload.topology import all_queue_names, declarations, purge

STARTUP_MARGIN = 5.0
"""Seconds between launching Locust and t=0, for processes to import (~2 s) and connect.

The topology is declared before that, so a fault at t=0 comes ≥ 5 s after the declaration:
RabbitMQ 3.10 can lose a durable queue (and its confirmed messages) killed within ~2 s of
its declaration (tests/integration/faultkit.py, DURABLE_SETTLE_S)."""
EXTERNAL_MARGIN = 10.0
"""Extra seconds before t=0 for external workers to see the run and connect."""
INTERRUPTED_STOP = 6.0
"""Seconds Locust gets to stop after a signal interrupted the run (30 s at a normal end)."""


@dataclass
class RunResult:
    run_dir: Path
    ledgers: list[Ledger] = field(default_factory=list)
    interrupted: bool = False

    def __str__(self) -> str:
        lines = [f"run directory: {self.run_dir}"]
        for i, led in enumerate(self.ledgers):
            lines.append(f"ledger r{i}: " + ", ".join(f"{k}={v}" for k, v in led.to_json().items()))
        return "\n".join(lines)


def check_run_faults(scenario: Scenario) -> None:
    """Every fault of the timeline must be possible here; fail before anything starts."""
    kind = scenario.broker.kind
    problems = check_faults(
        scenario.faults,
        broker_kind=kind,
        backend=scenario.broker.backend,
        node_names=node_names(scenario),
        links=dict(LINKS) if needs_proxy(scenario.faults) else None,
    )
    if problems:
        raise ConfigurationError("fault timeline:\n" + "\n".join(problems))


LINKS = {"producers": ["producers"], "consumers": ["consumers"]}


def _prepare(endpoint: BrokerEndpoint, scenario: Scenario) -> dict[str, int]:
    """Declare the topology and empty its queues; returns what was purged per queue."""
    adapter = make_adapter(endpoint, scenario.broker.client)
    adapter.connect()
    try:
        adapter.declare(declarations(scenario))
        return purge(adapter, all_queue_names(scenario))
    finally:
        adapter.close()


def replicate_on(endpoint: BrokerEndpoint, console: Console | Any, home: Path) -> Replicate:
    """Run a scenario file once on ``endpoint`` (a calibration run): its measured deliveries.
    ``console`` is a rich Console or a function taking one progress line; the run's processes
    are tracked in their own run home under ``home``."""
    if not isinstance(console, Console):
        console = Console(stderr=True, quiet=True)

    def replicate(path: Path, run_dir: Path) -> pd.DataFrame:
        s = load_scenario(path)
        (run_dir / "measured").mkdir(parents=True)
        (run_dir / "scenario.yaml").write_text(s.resolved_yaml(), encoding="utf-8")
        _prepare(endpoint, s)
        run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-calibration"
        with run_home(home, run_id) as entry:
            _replication(s, endpoint, None, run_dir, 0, workers=1, ui=False, console=console,
                         entry=entry)  # fmt: skip
        collect_side(run_dir / "measured", 1)
        errors = user_errors(run_dir / "measured")
        if errors:
            raise MqbedError(f"the calibration run failed: {errors[0]['detail']}")
        return pd.read_parquet(run_dir / "measured" / "deliveries.parquet")

    return replicate


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


def _replication(
    scenario: Scenario,
    endpoint: BrokerEndpoint,
    backend: LocalBackend | None,
    run_dir: Path,
    rep: int,
    *,
    workers: int,
    ui: bool,
    console: Console,
    external: tuple[int, Path] | None = None,
    entry: RunHome,
) -> list[str]:
    """One live replication; returns the fault runner's errors (empty when all went well)."""
    measured = run_dir / "measured"
    users = user_count(scenario)  # a scaled group has one user per slot
    margin = STARTUP_MARGIN + 0.02 * users + (EXTERNAL_MARGIN if external else 0.0)
    t0_ns = time.time_ns() + int(margin * 1e9)
    clock = RunClock(t0_ns)
    seed = replication_seed(scenario.seed, rep)
    proxy = FaultProxy(seed=seed, api_port=None).start() if needs_proxy(scenario.faults) else None
    links: dict[str, list[str]] = {}
    client_eps: dict[str, BrokerEndpoint] = {}
    if proxy is not None:
        links, client_eps = proxied_endpoints(proxy, endpoint)
    config = WorkerConfig(
        scenario_file=str(run_dir / "scenario.yaml"),
        measured_dir=str(measured),
        endpoint=client_eps.get("producers", endpoint).to_json(),
        consumer_endpoint=client_eps["consumers"].to_json() if "consumers" in client_eps else None,
        t0_ns=t0_ns,
        replication=rep,
        seed=seed,
        run_id=run_dir.name,
        stop_producers_at=scenario.duration,
        extra={CONTROL_KEY: str(run_dir / f"scale-control.r{rep}.json")}
        if scenario.autoscaling
        else {},
    )
    config_path = run_dir / f"worker-config.r{rep}.json"
    config.write(config_path, secrets=entry.secrets_path(rep))
    # Prometheus exporter of this process (MQBED_PROMETHEUS_SD_DIR set, e.g. by `mqbed up
    # --with-prometheus` or compose): run events, fault events and the broker poller's gauges
    exporter = exporter_from_env(f"control-r{rep}", run_id=run_dir.name)
    listeners = [exporter] if exporter is not None else []
    control = Recorder(measured, f"control-r{rep}", rep, batch_rows=1, listeners=listeners)
    queues = all_queue_names(scenario)
    poller: StatsPoller = make_stats_poller(endpoint, queues=queues)
    if exporter is not None:
        poller = ExportingPoller(poller, exporter)
    sampler = TimeseriesSampler(
        poller,
        clock,
        measured,
        queues,
        rep,
        scenario.recording.poll_interval,
    )
    scaler = _autoscaler(scenario, endpoint, clock, measured, rep, config)
    run_time = (t0_ns - time.time_ns()) / 1e9 + scenario.duration + scenario.drain_timeout + 5
    locust = LocustLauncher(config_path, measured / "locust", users, run_time, workers, ui,
                            external_workers=external[0] if external else 0,
                            rendezvous=external[1] if external else None,
                            secrets=entry.secrets_path(rep))  # fmt: skip
    runner: FaultRunner | None = None
    fault_rec: Recorder | None = None
    if scenario.faults and (proxy is not None or backend is not None):
        fault_rec = Recorder(measured, f"faults-r{rep}", rep, batch_rows=1, listeners=listeners)
        runner = FaultRunner(
            scenario.faults,
            clock=clock,
            recorder=fault_rec,
            brokers=LocalBrokerFaults(backend) if backend is not None else None,
            node_names=node_names(scenario),
            proxy=proxy,
            links=links,
            seed=seed,
            stop_at=scenario.duration,
            broker_kind=scenario.broker.kind,
        ).start()
    sampler.start()
    if scaler is not None:
        scaler.start()
    locust.start(f"r{rep}")
    entry.track(locust.refs())
    if locust.web_url:
        console.print(f"Locust web UI: {locust.web_url}", markup=False)
    try:
        if scenario.warmup > 0:
            control.event(0.0, "phase", "run", {"phase": "warmup", "until": scenario.warmup})
        control.event(scenario.warmup, "phase", "run", {"phase": "load"})
        control.event(scenario.duration, "phase", "run", {"phase": "drain"})
        empty_polls = 0
        last_poll = 0
        with Live(console=console, refresh_per_second=4, transient=True) as live:
            while True:
                time.sleep(0.1)
                t = clock.now()
                locust.check_started()
                if t < scenario.warmup:
                    phase = "warmup" if t >= 0 else "start"
                elif t < scenario.duration:
                    phase = "load"
                else:
                    phase = "drain"
                live.update(_progress(phase, t, scenario, sampler))
                latest = sampler.latest
                if phase != "drain" or latest.polls == last_poll:
                    continue
                last_poll = latest.polls
                if latest.t > scenario.duration + 0.5 and latest.broker_up and latest.depth == 0:
                    empty_polls += 1
                    if empty_polls >= 2:
                        break
                else:
                    empty_polls = 0
                if t >= scenario.duration + scenario.drain_timeout or not locust.alive():
                    control.event(t, "drain_timeout", "run", {"depth": latest.per_queue})
                    break
        control.event(clock.now(), "phase", "run", {"phase": "end"})
    finally:
        with INTERRUPTS.shielded():
            locust.stop(timeout=INTERRUPTED_STOP if INTERRUPTS.pending else 30.0)
            errors: list[str] = []
            if runner is not None:
                runner.stop()  # always heals: proxy, paused or killed broker, alarms
                errors = list(runner.errors)
            if fault_rec is not None:
                fault_rec.close()
            if proxy is not None:
                proxy.stop()
            if scaler is not None:
                scaler.stop()
            sampler.stop()
            control.close()
            if exporter is not None:
                exporter.close()
    return errors


def _autoscaler(
    scenario: Scenario,
    endpoint: BrokerEndpoint,
    clock: RunClock,
    measured: Path,
    rep: int,
    config: WorkerConfig,
) -> Any:
    """The live autoscaling loop of one replication (None without `autoscaling:`)."""
    if not scenario.autoscaling:
        return None
    from testbed.control.autoscaler import LiveAutoscaler

    return LiveAutoscaler(
        scenario,
        make_stats_poller(endpoint, queues=all_queue_names(scenario)),
        clock,
        Recorder(measured, f"autoscale-r{rep}", rep, batch_rows=1),
        Path(config.extra[CONTROL_KEY]),
    )


def rendezvous_path(out_dir: Path) -> Path:
    """Where external Locust workers look for the current run."""
    env = os.environ.get("MQBED_LOCUST_RENDEZVOUS")
    return Path(env) if env else Path(out_dir) / ".locust" / "current.json"


def run_scenario(
    path: Path,
    *,
    home: Path,
    out_dir: Path,
    backend: str | None = None,
    replications: int | None = None,
    predict: bool = True,
    workers: int | None = None,
    ui: bool = False,
    console: Console | None = None,
    external_workers: int = 0,
    profile: Path | None = None,
    calibration: str = "auto",
) -> RunResult:
    """`external_workers` > 0: Locust's workers are started elsewhere by
    :mod:`testbed.workload.worker_service` and find the run in ``<out_dir>/.locust/
    current.json`` (or ``$MQBED_LOCUST_RENDEZVOUS``).

    The prediction uses ``profile`` when given; otherwise (``calibration``) ``"auto"``: this
    machine's cached profile, measured first by a quick calibration of the client path on the
    run's broker when there is none (:mod:`testbed.calibration.machine`); ``"cached"``: the
    cached profile if any, else the shipped one; ``"shipped"``: the shipped profile."""
    console = console or Console(stderr=True)
    scenario = load_scenario(path)
    for issue in validate_file(path)[1]:
        console.print(str(issue), markup=False)
    if backend is not None:
        scenario.broker.backend = backend  # type: ignore[assignment]
    check_run_faults(scenario)
    reps = replications or scenario.replications
    started = datetime.now(UTC)
    run_id = f"{started.strftime('%Y%m%dT%H%M%SZ')}-{scenario.name}"
    run_dir = Path(out_dir) / run_id
    (run_dir / "measured").mkdir(parents=True, exist_ok=False)
    # broker.urls keep their user, host and port; never the password
    hidden = url_passwords(scenario.broker.urls)
    (run_dir / "scenario.yaml").write_text(
        redact_text(scenario.resolved_yaml(), hidden), encoding="utf-8"
    )
    env: dict[str, Any] = environment(
        scenario_file=str(path),
        backend=scenario.broker.backend,
        run_id=run_id,
        started=started.isoformat(),
        replications=reps,
        interrupted=True,  # until the run ends: what a SIGKILLed run leaves says so
    )
    _write_env(run_dir, env)
    env["interrupted"] = False
    result = RunResult(run_dir)
    with interruptible(), run_home(home, run_id) as entry:
        errors, choice = _live(
            scenario, home, out_dir, reps, env, result, entry, console,
            workers=workers, ui=ui, external_workers=external_workers,
            predict=predict, profile=profile, calibration=calibration,
        )  # fmt: skip
        if errors:
            shown = "; ".join(f"{e['target']}: {e['detail']}" for e in errors[:3])
            raise MqbedError(
                f"{len(errors)} Locust user(s) failed, so the run is not valid ({shown}); "
                f"records are in {run_dir}"
            )
        if predict:
            assert choice is not None
            _predict(scenario, run_dir, reps, console, env, choice)
    return result


def _write_env(run_dir: Path, env: dict[str, Any]) -> None:
    text = redact_text(json.dumps(env, indent=2, default=str))
    (run_dir / "environment.json").write_text(text + "\n", encoding="utf-8")


def _live(
    scenario: Scenario,
    home: Path,
    out_dir: Path,
    reps: int,
    env: dict[str, Any],
    result: RunResult,
    entry: RunHome,
    console: Console,
    **options: Any,
) -> tuple[list[dict[str, Any]], ProfileChoice | None]:
    """Provision, choose the prediction's profile (calibrating first if need be), run every
    replication, collect; returns the Locust users' errors and the profile choice.

    Whatever ends it (an error, a signal), the records are merged and ``environment.json``
    written; a signal makes it raise (`testbed.interrupts`) after that."""
    run_dir = result.run_dir
    external_workers = options.pop("external_workers")
    endpoint_info: dict[str, Any] = {}
    choice: ProfileChoice | None = None
    try:
        with provisioned(scenario, home, entry.dir.name) as (endpoint, owner):
            endpoint_info = {
                "kind": endpoint.kind,
                "name": endpoint.name,
                "version": endpoint.version,
            }
            console.print(
                f"broker {endpoint.name} ({endpoint.kind} {endpoint.version}) ready", markup=False
            )
            if options["predict"]:
                choice = choose_profile(
                    scenario,
                    home,
                    options["profile"],
                    options["calibration"],
                    version=endpoint.version or "unknown",
                    replicate=replicate_on(endpoint, console, home),
                    progress=lambda line: console.print(line, markup=False),
                )
            for rep in range(reps):
                if reps > 1:
                    console.print(f"replication {rep + 1}/{reps}", markup=False)
                purged = _prepare(endpoint, scenario)
                if purged:
                    console.print(f"purged leftover messages: {purged}", markup=False)
                    env.setdefault("purged", {})[f"r{rep}"] = purged
                fault_errors = _replication(
                    scenario, endpoint, owner, run_dir, rep, console=console, entry=entry,
                    workers=options["workers"] or scenario.workers, ui=options["ui"],
                    external=(external_workers, rendezvous_path(out_dir))
                    if external_workers else None,
                )  # fmt: skip
                if fault_errors:
                    env.setdefault("fault_errors", {})[f"r{rep}"] = fault_errors
                    for line in fault_errors:
                        console.print(f"fault timeline r{rep}: {line}", markup=False)
    except (KeyboardInterrupt, RunInterrupted):
        result.interrupted = True
        env["interrupted"] = True
        console.print(f"interrupted: stopping cleanly; records are in {run_dir}", markup=False)
        raise
    except MqbedError:
        env["interrupted"] = True
        raise
    finally:
        with INTERRUPTS.shielded():
            if INTERRUPTS.pending:
                result.interrupted = env["interrupted"] = True
            result.ledgers = collect_side(run_dir / "measured", reps)
            errors: list[dict[str, Any]] = user_errors(run_dir / "measured")
            env["user_errors"] = errors
            env["broker"] = endpoint_info
            env["ended"] = datetime.now(UTC).isoformat()
            _write_env(run_dir, env)
    return errors, choice


def _predict(
    scenario: Scenario,
    run_dir: Path,
    reps: int,
    console: Console,
    env: dict[str, Any],
    choice: ProfileChoice,
) -> None:
    """The paired prediction, from the scenario and a calibration profile only."""
    from emulator.predict import predict

    console.print(f"predicting the same run (simulation, profile {choice.path}) ...", markup=False)
    pred = predict(
        scenario,
        run_dir,
        profile=choice.profile,
        replications=max(reps, 3),
        progress=lambda line: console.print(line, markup=False),
        profile_info=choice.describe(),
    )
    env["prediction"] = {
        "method": pred.method,
        "replications": pred.replications,
        "profile": pred.summary.get("profile"),
        "wall_s": pred.wall_s,
    }
    _write_env(run_dir, env)
