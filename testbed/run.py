"""The run pipeline: provision -> warm up -> load -> drain -> collect -> predict -> report.

Each live replication (warm up, load, drain) is `testbed.replication.run_replication`.

Interruptions (Ctrl-C, a crash, SIGTERM, SIGHUP) still leave a readable run directory: records
are flushed in batches while running, and the `finally` path stops Locust by process group,
merges whatever parts exist, writes the ledger and `environment.json` (``"interrupted": true``),
and stops the brokers this run started (`testbed.interrupts`: exit 130, 143, 129). A SIGKILLed
run leaves ``environment.json`` as written at the start (``"interrupted": true``), the parts
flushed so far, and its home ``<home>/runs/<run_id>/`` (and, on the docker backend, its
containers and the dockerd it started) for `mqbed down` or the next run in that home to clean.

No broker password is written under the run directory: the scenario copy is redacted
(`testbed.core.redact`), Locust processes read the credentials from a 0600 file in the run's
home (`testbed.backends.run_homes`), removed when the replication ends.
"""

from __future__ import annotations

__all__ = [
    "STARTUP_MARGIN",
    "RunResult",
    "check_run_faults",
    "rendezvous_path",
    "replicate_on",
    "run_scenario",
    "finalise",
]

import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.provision import node_names, provisioned
from testbed.backends.run_homes import RunHome, reap_before_run, run_home
from testbed.brokers import make_adapter
from testbed.calibration.choice import ProfileChoice, choose_profile
from testbed.calibration.client_path import Replicate
from testbed.calibration.restart import restart_probe
from testbed.calibration.restart_observed import learn_restart_time
from testbed.core.atomic import atomic_write_text
from testbed.core.overrides import RunOverrides
from testbed.core.records import Ledger
from testbed.core.redact import redact_text, url_passwords
from testbed.core.scenario import Scenario, TraceArrival
from testbed.core.scenario_loader import load_scenario, validate_file
from testbed.core.trace_file import copy_trace
from testbed.exceptions import ConfigurationError, MqbedError
from testbed.faults.schedule import check_faults, needs_proxy
from testbed.interrupts import INTERRUPTS, RunInterrupted, interruptible
from testbed.observe.environment import environment
from testbed.observe.ledger import (
    collect_side,
    locust_exceptions,
    silent_replications,
    user_errors,
)
from testbed.observe.process_cpu import generator_report, read_usage
from testbed.replication import STARTUP_MARGIN, ReplicationSpec, run_replication
from testbed.workload.topology import declarations, purge, purgeable_queue_names


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
        return purge(adapter, purgeable_queue_names(scenario))
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
            run_replication(ReplicationSpec(s, endpoint, run_dir, 0, entry), console)
        collect_side(run_dir / "measured", 1)
        errors = user_errors(run_dir / "measured")
        if errors:
            raise MqbedError(f"the calibration run failed: {errors[0]['detail']}")
        return pd.read_parquet(run_dir / "measured" / "deliveries.parquet")

    return replicate


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
    overrides: RunOverrides | None = None,
) -> RunResult:
    """`external_workers` > 0: Locust's workers are started elsewhere by
    :mod:`testbed.workload.worker_service` and find the run in ``<out_dir>/.locust/
    current.json`` (or ``$MQBED_LOCUST_RENDEZVOUS``).

    The prediction's profile: ``profile``, else as ``calibration`` says (`testbed.calibration.
    choice`); the run's broker kills then join the cached restart time (`.restart_observed`).

    ``overrides`` (``mqbed run --rate/--duration/--set ...``) change the scenario before it is
    validated; the run directory's ``scenario.yaml`` is the scenario with them."""
    console = console or Console(stderr=True, emoji=False)
    scenario = load_scenario(path, overrides)
    for issue in validate_file(path, overrides)[1]:
        console.print(str(issue), markup=False)
    if backend is not None:
        scenario.broker.backend = backend  # type: ignore[assignment]
    check_run_faults(scenario)
    reps = replications or scenario.replications
    reap_before_run(home, lambda line: console.print(line, markup=False))  # killed runs' leftovers
    started = datetime.now(UTC)
    run_id = f"{started.strftime('%Y%m%dT%H%M%SZ')}-{scenario.name}"
    run_dir = Path(out_dir) / run_id
    (run_dir / "measured").mkdir(parents=True, exist_ok=False)
    # broker.urls keep their user, host and port; never the password
    hidden = url_passwords(scenario.broker.urls)
    (run_dir / "scenario.yaml").write_text(
        redact_text(scenario.resolved_yaml(), hidden), encoding="utf-8"
    )
    for producer in scenario.producers:  # the run directory is self-contained
        if isinstance(producer.arrival, TraceArrival):
            copy_trace(producer.arrival.file, Path(path).parent, run_dir)
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
        errors += silent_replications(scenario, result.ledgers, run_dir / "measured" / "locust")
        if errors:
            shown = "; ".join(f"{e['target']}: {e['detail']}" for e in errors[:3])
            raise MqbedError(
                f"the run is not valid: {len(errors)} error(s) of its Locust users ({shown}); "
                f"records are in {run_dir}"
            )
        if predict:
            assert choice is not None
            _predict(scenario, run_dir, reps, console, env, choice)
            learn_restart_time(choice, run_dir / "measured", calibration, console)
    return result


def _choose(
    scenario: Scenario,
    home: Path,
    endpoint: BrokerEndpoint,
    owner: Backend | None,
    console: Console,
    options: dict[str, Any],
) -> tuple[ProfileChoice, BrokerEndpoint]:
    """The prediction's profile (measured first if need be, `choose_profile`) and the run's
    endpoint afterwards (a restart measured on the run's broker gave it another pid)."""

    def say(line: str) -> None:
        console.print(line, markup=False)

    choice = choose_profile(
        scenario,
        home,
        options["profile"],
        options["calibration"],
        version=endpoint.version or "unknown",
        replicate=replicate_on(endpoint, console, home),
        progress=say,
        broker_pids=[endpoint.pid] if endpoint.pid else [],
        restart_probe=restart_probe(scenario, owner, endpoint.name, say),
    )
    if owner is not None:  # its state, not a guess from the profile, says the current pid
        endpoint = next((e for e in owner.endpoints() if e.name == endpoint.name), endpoint)
    return choice, endpoint


def _write_env(run_dir: Path, env: dict[str, Any]) -> None:
    text = redact_text(json.dumps(env, indent=2, default=str))
    atomic_write_text(run_dir / "environment.json", text + "\n")


def finalise(
    run_dir: Path,
    reps: int,
    env: dict[str, Any],
    result: RunResult,
    console: Console,
    failure: BaseException | None,
) -> list[dict[str, Any]]:
    """The live side's finalisation in a fixed, crash-safe order: ``environment.json`` first
    (end time, interrupted), then the merged tables and ledgers, then the users' errors into
    ``environment.json`` again. Every step runs even when an earlier one fails. A step's error
    (a full disk) never replaces `failure`, the run's own error or interruption, which goes on
    with its exit code; without one, the first step error is raised at the end."""
    env["ended"] = datetime.now(UTC).isoformat()
    problems: list[Exception] = []
    errors: list[dict[str, Any]] = []

    def step(what: str, action: Any) -> None:
        try:
            action()
        except Exception as e:  # noqa: BLE001 - reported below, never replacing `failure`
            problems.append(e)
            env.setdefault("finalisation_errors", []).append(f"{what}: {e!r}")
            console.print(f"finalisation: {what} failed: {e!r}", markup=False)

    def collect() -> None:
        result.ledgers = collect_side(run_dir / "measured", reps)

    def users() -> None:
        errors.extend(user_errors(run_dir / "measured"))
        errors.extend(locust_exceptions(run_dir / "measured" / "locust"))
        env["user_errors"] = errors

    def generators() -> None:
        env["load_generators"], warnings = generator_report(read_usage(run_dir / "measured"))
        for line in warnings:
            console.print(line, markup=False)

    step("environment.json", lambda: _write_env(run_dir, env))
    step("merging the records and writing the ledgers", collect)
    step("reading the users' errors", users)
    step("reading the load generators' CPU use", generators)
    step("environment.json", lambda: _write_env(run_dir, env))
    if problems and failure is None:
        raise problems[0]
    return errors


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
    failure: BaseException | None = None
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
                choice, endpoint = _choose(scenario, home, endpoint, owner, console, options)
            for rep in range(reps):
                if reps > 1:
                    console.print(f"replication {rep + 1}/{reps}", markup=False)
                purged = _prepare(endpoint, scenario)
                if purged:
                    console.print(f"purged leftover messages: {purged}", markup=False)
                    env.setdefault("purged", {})[f"r{rep}"] = purged
                spec = ReplicationSpec(
                    scenario, endpoint, run_dir, rep, entry, backend=owner,
                    workers=options["workers"] or scenario.workers, ui=options["ui"],
                    external=(external_workers, rendezvous_path(out_dir))
                    if external_workers else None,
                )  # fmt: skip
                fault_errors = run_replication(spec, console)
                if fault_errors:
                    env.setdefault("fault_errors", {})[f"r{rep}"] = fault_errors
                    for line in fault_errors:
                        console.print(f"fault timeline r{rep}: {line}", markup=False)
    except (KeyboardInterrupt, RunInterrupted) as e:
        failure = e
        result.interrupted = True
        env["interrupted"] = True
        console.print(f"interrupted: stopping cleanly; records are in {run_dir}", markup=False)
        raise
    except MqbedError as e:
        failure = e
        env["interrupted"] = True
        raise
    except BaseException as e:  # kept so a failing finalisation step cannot replace it
        failure = e
        raise
    finally:
        with INTERRUPTS.shielded():
            if INTERRUPTS.pending:
                result.interrupted = env["interrupted"] = True
            env["broker"] = endpoint_info
            errors = finalise(run_dir, reps, env, result, console, failure)
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
