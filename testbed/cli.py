"""`mqbed` command line (README.md "Command line"). Each command is a thin shell over a module."""

from __future__ import annotations

__all__ = ["app", "main"]

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from testbed.exceptions import AccuracyMiss, MqbedError, ScenarioIssue

app = typer.Typer(
    name="mqbed",
    help="Live emulation testbed for message brokers: live runs, paired predictions, reports.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

HomeOpt = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional here
    typer.Option(
        "--home",
        help="Testbed directory (state, broker data, logs). Default: $MQBED_HOME or ./.mqbed",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


def testbed_home(home: Path | None) -> Path:
    return (home or Path(os.environ.get("MQBED_HOME", ".mqbed"))).resolve()


def _kinds(broker: str) -> list[str]:
    choices = {"rabbitmq": ["rabbitmq"], "activemq": ["activemq"], "all": ["rabbitmq", "activemq"]}
    if broker not in choices:
        from testbed.core.suggest import did_you_mean

        raise typer.BadParameter(
            f"{broker!r} is not a broker{did_you_mean(broker, choices)}; use rabbitmq, activemq "
            "or all",
            param_hint="--broker",
        )
    return choices[broker]


def _say(console: Console, text: str) -> None:
    """Print text that may hold user input (file names, YAML values) exactly as it is: no rich
    markup (``[bold]`` would vanish), no emoji codes (``:x:``), no highlighting."""
    console.print(text, markup=False, emoji=False, highlight=False, soft_wrap=True)


def _validate_one(f: Path) -> tuple[object, list[ScenarioIssue]]:
    from testbed.core.scenario_loader import validate_file

    try:
        return validate_file(f)
    except Exception as e:  # a loader bug must not hide the other files' results
        message = (
            f"internal error while checking this file ({type(e).__name__}: {e}); please report"
        )
        return None, [ScenarioIssue(str(f), 1, "", message[:300])]


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.")],
    as_json: JsonOpt = False,
) -> None:
    """Check scenario files: every error with file:line, field, value and a suggestion.

    Each file is checked and reported on its own; the exit code is 2 if any file is bad."""
    failed = False
    report = []
    for f in files:
        scenario, issues = _validate_one(f)
        errors = [i for i in issues if i.severity == "error"]
        failed |= bool(errors) or scenario is None
        report.append(
            {
                "file": str(f),
                "ok": scenario is not None and not errors,
                "issues": [
                    {"line": i.line, "path": i.path, "message": i.message, "severity": i.severity}
                    for i in issues
                ],
            }
        )
        if not as_json:
            for i in issues:
                _say(err, str(i))
            if scenario is not None and not errors:
                _say(out, f"ok: {f}")
    if as_json:
        print(json.dumps(report, indent=2))
    raise typer.Exit(2 if failed else 0)


@app.command()
def up(
    backend: Annotated[str, typer.Option(help="local | docker | external")] = "local",
    broker: Annotated[str, typer.Option(help="rabbitmq | activemq | all")] = "all",
    nodes: Annotated[int, typer.Option(min=1, max=5, help="Nodes per broker kind.")] = 1,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for health.")] = 60.0,
    with_prometheus: Annotated[
        bool,
        typer.Option(
            "--with-prometheus",
            help="Also start Prometheus (127.0.0.1) scraping the brokers and mqbed's exporters.",
        ),
    ] = False,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start brokers, wait until healthy, print their URLs and write the state file."""
    kinds = _kinds(broker)
    root = testbed_home(home)
    t0 = time.monotonic()
    with err.status(f"starting {', '.join(kinds)} ({backend}) under {root} ..."):
        if backend == "local":
            from testbed.backends.local import LocalBackend

            endpoints = LocalBackend(root).up(kinds, nodes=nodes, timeout=timeout, detach=True)  # type: ignore[arg-type]
        elif backend == "docker":
            from testbed.backends.docker import DockerBackend
            from testbed.backends.docker_engine import start_engine_for

            docker = DockerBackend(root, start_engine_for(root), log=err.print)
            endpoints = docker.up(kinds, nodes=nodes, timeout=timeout, detach=True)  # type: ignore[arg-type]
        elif backend == "external":
            from testbed.backends.external import ENV_URLS, ExternalBackend, urls_from_env

            endpoints = ExternalBackend(urls_from_env(), source=f"${ENV_URLS}").up(kinds)
        else:
            raise typer.BadParameter(
                f"{backend!r} is not a backend; use local, docker or external",
                param_hint="--backend",
            )
        prometheus_url = None
        if with_prometheus:
            from testbed.observe.prometheus import PrometheusServer

            prometheus_url = PrometheusServer(root).start(endpoints)
    elapsed = time.monotonic() - t0
    if as_json:
        print(
            json.dumps(
                {
                    "home": str(root),
                    "backend": backend,
                    "startup_s": round(elapsed, 2),
                    "brokers": [e.to_json() for e in endpoints],
                    "prometheus_url": prometheus_url,
                },
                indent=2,
            )
        )
        return
    for e in endpoints:
        scheme = "amqp" if e.kind == "rabbitmq" else "stomp"
        out.print(f"[bold]{e.name}[/] ({e.kind} {e.version or ''}) pid {e.pid}")
        out.print(f"  {scheme}://{e.username}:{e.password}@{e.host}:{e.port}", markup=False)
        if e.management_url:
            out.print(f"  management  {e.management_url}", markup=False)
        if e.prometheus_url:
            out.print(f"  prometheus  {e.prometheus_url}/metrics", markup=False)
    if prometheus_url:
        out.print(f"Prometheus  {prometheus_url} (scrapes runs started in {root})", markup=False)
    out.print(
        f"healthy after {elapsed:.1f}s; state in {root}; stop with 'mqbed down'",
        markup=False,
    )


@app.command()
def down(
    home: HomeOpt = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for each stop.")] = 30.0,
) -> None:
    """Stop everything `mqbed up` started (read from the state files) and what killed runs left
    in the home's runs/ (their Locust processes, brokers and homes); leave no process behind."""
    from testbed.backends.docker import STATE_FILE as DOCKER_STATE
    from testbed.backends.local import LocalBackend
    from testbed.observe.prometheus import PrometheusServer

    root = testbed_home(home)
    stopped = LocalBackend(root).down(timeout=timeout)
    from testbed.backends.run_homes import reap_run_homes  # what killed runs left

    stopped += [f"{r} (killed run)" for r in reap_run_homes(root, timeout=timeout)]
    if (root / DOCKER_STATE).exists():  # containers of `up --backend docker`
        from testbed.backends.docker import DockerBackend

        removed = DockerBackend(root).down(timeout=timeout)  # on the engine they were made on
        stopped += [f"{n} (container)" for n in removed]
    if PrometheusServer(root).stop(timeout):
        stopped.append("prometheus")
    from testbed.backends.docker_engine import stop_engine_for

    if stop_engine_for(root):
        stopped.append("dockerd")
    out.print(
        f"stopped {len(stopped)}: {', '.join(stopped) or 'nothing was running'}", markup=False
    )


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    backend: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            help="Override broker.backend (local|docker|external).", envvar="MQBED_BACKEND"
        ),
    ] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Where run directories go.")] = Path(
        "runs"
    ),
    replications: Annotated[Optional[int], typer.Option(min=1)] = None,  # noqa: UP045
    no_predict: Annotated[
        bool, typer.Option("--no-predict", help="Skip the paired prediction.")
    ] = False,
    workers: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(min=1, max=64, help="Locust worker processes (master + N workers)."),
    ] = None,
    ui: Annotated[bool, typer.Option("--ui", help="Open Locust's web UI (127.0.0.1).")] = False,
    external_workers: Annotated[
        int,
        typer.Option(
            "--external-workers",
            min=0,
            max=64,
            envvar="MQBED_EXTERNAL_WORKERS",
            help="Locust workers started elsewhere (compose's locust-worker service, "
            "`python -m testbed.workload.worker_service`); this run starts the master only.",
        ),
    ] = 0,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Skip the Spark analysis and report.html.")
    ] = False,
    spark_master: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--spark-master", help="Spark master URL (default local[*])."),
    ] = None,
    home: HomeOpt = None,
    profile: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--profile", help="Calibration profile for the prediction (a YAML file)."),
    ] = None,
    calibration: Annotated[
        str,
        typer.Option(
            "--calibration",
            envvar="MQBED_CALIBRATION",
            help="Without --profile: auto = this machine's cached profile, measured first "
            "(~1 min) when there is none; cached = cached else shipped; shipped = "
            "deploy/calibration/.",
        ),
    ] = "auto",
) -> None:
    """Run a scenario live (provision -> warm up -> load -> drain -> collect -> predict)."""
    from testbed.observe.exporter import ENV_SD_DIR
    from testbed.observe.prometheus import PrometheusServer
    from testbed.run import run_scenario

    prometheus = PrometheusServer(testbed_home(home))
    if prometheus.running():  # started by `mqbed up --with-prometheus`: export to it
        os.environ.setdefault(ENV_SD_DIR, str(prometheus.sd_dir))
    result = run_scenario(
        scenario,
        home=testbed_home(home),
        out_dir=out_dir,
        backend=backend,
        replications=replications,
        predict=not no_predict,
        workers=workers,
        ui=ui,
        console=err,
        external_workers=external_workers,
        profile=profile,
        calibration=calibration,
    )
    out.print(str(result), markup=False)
    if not no_report:
        from testbed.report.build import report_after_run

        report_after_run(result.run_dir, spark_master=spark_master, console=out)


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories.")],
    spark_master: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--spark-master", help="Spark master URL (default local[*])."),
    ] = None,
) -> None:
    """(Re)build the analysis, report.html and summary.md of runs (+ a cross-run table)."""
    from testbed.report.build import build_report, load_summary
    from testbed.report.verdict import print_verdict

    missing = [str(d) for d in run_dirs if not (d / "measured").is_dir()]
    if missing:
        raise typer.BadParameter(f"not run directories (no measured/): {', '.join(missing)}")
    reports = build_report(run_dirs, spark_master=spark_master, console=err)
    for run_dir, path in zip(run_dirs, reports, strict=True):
        print_verdict(load_summary(run_dir), out)
        out.print(f"report: {path}", markup=False)


@app.command()
def sweep(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    sets: Annotated[
        list[str], typer.Option("--set", help="path=a:b:step or path=v1,v2,... (repeatable)")
    ],
    sla_p95: Annotated[str, typer.Option(help="p95 latency target for the SLA capacity.")] = (
        "100ms"
    ),
    replications: Annotated[int, typer.Option(min=1)] = 1,
    no_predict: Annotated[bool, typer.Option("--no-predict")] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Where sweep runs go.")] = Path("runs"),
    spark_master: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--spark-master", help="Spark master URL (default local[*])."),
    ] = None,
    home: HomeOpt = None,
) -> None:
    """Run every grid point live and predicted; curves, saturation point, SLA capacity."""
    from testbed.core.units import parse_duration
    from testbed.sweep import sweep as run_sweep

    try:
        target = parse_duration(sla_p95)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--sla-p95") from e
    path = run_sweep(
        scenario,
        sets,
        home=testbed_home(home),
        out_dir=out_dir,
        replications=replications,
        predict=not no_predict,
        spark_master=spark_master,
        sla_p95=target,
        console=err,
    )
    out.print(f"sweep report: {path}", markup=False)


@app.command()
def predict(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
    method: Annotated[str, typer.Option(help="simulate | analytic")] = "simulate",
    profile: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            help="Calibration profile (default: this machine's cached profile for the broker "
            "and client library, else deploy/calibration/<kind>[-<client>]-local.yaml)."
        ),
    ] = None,
    replications: Annotated[Optional[int], typer.Option(min=1)] = None,  # noqa: UP045
    home: HomeOpt = None,
    processes: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(min=1, help="Parallel processes for replications."),
    ] = None,
    out_dir: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", help="Run directory; the prediction goes to DIR/predicted/."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict a run from its scenario and a calibration profile only (never measurements)."""
    if method not in ("simulate", "analytic"):
        raise typer.BadParameter(f"{method!r}: use simulate or analytic", param_hint="--method")
    from emulator.predict import predict as run_predict
    from testbed.calibration.choice import profile_without_broker
    from testbed.core.scenario_loader import load_scenario

    s = load_scenario(scenario)
    choice = profile_without_broker(s, testbed_home(home), profile)
    err.print(f"profile: {choice.path} ({choice.origin})", markup=False)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = out_dir or Path("runs") / f"{stamp}-{s.name}-predicted"
    res = run_predict(
        s,
        target,
        method=method,
        profile=choice.profile,
        replications=replications,  # type: ignore[arg-type]
        processes=processes,
        progress=lambda line: err.print(line, markup=False),
        profile_info=choice.describe(),
    )
    if as_json:
        print(json.dumps(res.summary, indent=2, default=str))
    else:
        out.print(str(res), markup=False)


@app.command()
def calibrate(
    broker: Annotated[str, typer.Option(help="rabbitmq | activemq")],
    client: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="Client library: pika | kombu (rabbitmq), stomp (activemq)."),
    ] = None,
    out_file: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--out",
            help="Profile YAML (default: this machine's cache, "
            "<home>/calibration/<host>-<broker>-<version>-<client>.yaml, which runs use).",
        ),
    ] = None,
    duration: Annotated[float, typer.Option(min=1, help="Seconds per point after warm-up.")] = 60,
    repeats: Annotated[int, typer.Option(min=1, help="Repetitions per point.")] = 3,
    quick: Annotated[
        bool, typer.Option("--quick", help="2 s points, one repeat (a smoke test).")
    ] = False,
    client_path_only: Annotated[
        bool,
        typer.Option(
            "--client-path-only",
            help="Measure only the client path (~1 min) on top of the profile at --out "
            "(or the shipped one).",
        ),
    ] = False,
    scale: Annotated[
        float,
        typer.Option(min=0.2, max=20, help="Stretch the client-path phases (1 = ~35 s of load)."),
    ] = 1.0,
    home: HomeOpt = None,
) -> None:
    """Calibrate a broker and client library on this machine -> a profile (docs/models.md §9).

    Ends with the goodness-of-fit table of the client path."""
    from testbed.calibrate import calibrate_machine, fit_table
    from testbed.calibration.api import calibrate_endpoint
    from testbed.run import replicate_on

    def micro(path: Path, endpoint: Any) -> Path:
        return calibrate_endpoint(
            endpoint,
            path,
            duration=duration,
            repeats=repeats,
            quick=quick,
            progress=lambda line: err.print(line, markup=False),
        )

    path, cp = calibrate_machine(
        broker,
        client=client,
        home=testbed_home(home),
        out=out_file,
        micro=None if client_path_only else micro,
        scale=0.5 if quick else scale,
        replicate_on=replicate_on,
        console_line=lambda line: err.print(line, markup=False),
    )
    for line in fit_table(cp):
        out.print(line, markup=False)
    out.print(f"wrote {path}", markup=False)


@app.command()
def bench(
    suite: Annotated[
        str,
        typer.Option(
            "--suite",
            help="performance (figures -> docs/performance.md) | accuracy (the scenario library "
            "live and predicted -> docs/accuracy.md) | all",
        ),
    ] = "performance",
    quick: Annotated[
        bool, typer.Option("--quick", help="Short variants: checks the machinery, not numbers.")
    ] = False,
    only: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option(
            "--only",
            help="performance: workload | simulator | fault-proxy | correlation; accuracy: a "
            "case name or scenario file fragment",
        ),
    ] = None,
    out_file: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", help="Report file (default docs/<suite>.md; one suite only)."),
    ] = None,
    replications: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(min=1, help="accuracy: replications per scenario (default 3; --quick 1)."),
    ] = None,
    runs: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--runs", help="accuracy: where run directories go (runs/accuracy-<utc>)."),
    ] = None,
    reuse: Annotated[
        bool,
        typer.Option(
            "--reuse",
            help="accuracy: judge the runs already in --runs again (analysis rebuilt, no live "
            "runs)",
        ),
    ] = False,
    report_only: Annotated[
        bool,
        typer.Option(
            "--report-only",
            help="accuracy: exit 0 even when a case misses (a metric outside its target and "
            "its measured interval); without it such a miss exits 1. --quick never fails on "
            "numbers.",
        ),
    ] = False,
    home: HomeOpt = None,
) -> None:
    """Run the benchmark suites and write docs/performance.md and/or docs/accuracy.md."""
    from testbed.bench import ROOT, run_benchmarks

    if suite not in ("performance", "accuracy", "all"):
        raise typer.BadParameter(f"--suite {suite!r}: choose performance, accuracy or all")
    if out_file is not None and suite == "all":
        raise typer.BadParameter("--out names one report; use it with one --suite")

    def say(line: str) -> None:
        err.print(line, markup=False)

    if suite in ("performance", "all"):
        target = out_file or ROOT / "docs" / "performance.md"
        perf_only = only if suite == "performance" else None
        path = run_benchmarks(target, quick=quick, only=perf_only, progress=say)
        out.print(f"wrote {path}", markup=False)
    if suite in ("accuracy", "all"):
        import shlex

        from testbed.accuracy import accuracy_misses, run_accuracy

        target = out_file or ROOT / "docs" / "accuracy.md"
        path = run_accuracy(
            target,
            quick=quick,
            only=only if suite == "accuracy" else None,
            home=testbed_home(home),
            runs_dir=runs,
            reuse=reuse,
            replications=replications,
            command=shlex.join(["mqbed", "bench", *sys.argv[2:]]),
            progress=say,
        )
        out.print(f"wrote {path} and {path.with_suffix('.json')}", markup=False)
        missing = accuracy_misses(path.with_suffix(".json"))
        if missing and not (report_only or quick):
            raise AccuracyMiss(
                f"{len(missing)} case(s) missed (outside target and measured interval): "
                + "; ".join(missing)
                + " — see the overview in "
                + str(path)
                + " (--report-only exits 0)"
            )


def main() -> None:
    """Console-script entry: one-line reason and a non-zero exit for expected failures;
    130 after Ctrl-C (the run directory is still written)."""
    try:
        rv = app(standalone_mode=False)
    except MqbedError as e:
        _say(err, f"mqbed: {e}")
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err.print("mqbed: interrupted", markup=False)
        sys.exit(130)
    except Exception as e:
        # usage errors (typer's vendored click): show the message, exit with its code (2)
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        raise
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
