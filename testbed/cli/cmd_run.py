"""`mqbed run`: one scenario live, its paired prediction, its report, its thresholds (SLOs)."""

from __future__ import annotations

__all__ = ["run", "parse_cli_thresholds", "threshold_table"]

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from testbed.cli.app import HomeOpt, JsonOpt, SparkOpt, app, err, out, say, testbed_home
from testbed.cli.output import json_output
from testbed.core.overrides import RunOverrides
from testbed.core.thresholds import (
    Threshold,
    ThresholdResult,
    evaluate,
    format_limit,
    measured_figures,
    needs_analysis,
    parse_threshold,
)
from testbed.exceptions import ThresholdMiss

OutOpt = Annotated[
    Path,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Output: the parent directory; the run creates a new run directory inside it "
        "(as sweep --out and bench --out).",
    ),
]
BackendOpt = Annotated[
    Literal["local", "docker", "external"] | None,
    typer.Option(help="Override broker.backend.", envvar="MQBED_BACKEND"),
]
ReplicationsOpt = Annotated[
    int | None, typer.Option(min=1, metavar="N", help="Replications (default: the scenario's).")
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(min=1, max=64, metavar="N", help="Locust worker processes (master + N workers)."),
]
ExternalOpt = Annotated[
    int,
    typer.Option(
        "--external-workers", min=0, max=64, metavar="N", envvar="MQBED_EXTERNAL_WORKERS",
        help="Locust workers started elsewhere (compose's locust-worker service, "
        "`python -m testbed.workload.worker_service`); this run starts the master only.",
    ),
]  # fmt: skip
MasterHostOpt = Annotated[
    str | None,
    typer.Option(
        "--master-bind-host", metavar="ADDRESS", envvar="MQBED_LOCUST_MASTER_HOST",
        help="With --external-workers: the address the Locust master binds (default "
        "127.0.0.1; workers on other hosts need one they can reach, or 0.0.0.0).",
    ),
]  # fmt: skip
MasterPortOpt = Annotated[
    int | None,
    typer.Option(
        "--master-bind-port", min=1, max=65535, metavar="PORT", envvar="MQBED_LOCUST_MASTER_PORT",
        help="With --external-workers: the port the Locust master binds (default: a free one).",
    ),
]  # fmt: skip
MasterAdvertiseOpt = Annotated[
    str | None,
    typer.Option(
        "--master-advertise", metavar="ADDRESS", envvar="MQBED_LOCUST_MASTER_ADVERTISE",
        help="With --external-workers: the address the rendezvous file tells workers to "
        "connect to (default: the bind address).",
    ),
]  # fmt: skip
ProfileOpt = Annotated[
    Path | None,
    typer.Option(
        "--profile", metavar="FILE", help="Calibration profile for the prediction (a YAML file)."
    ),
]
CalibrationOpt = Annotated[
    Literal["auto", "fresh", "cached", "shipped"],
    typer.Option(
        "--calibration", envvar="MQBED_CALIBRATION",
        help="Without --profile: auto = this machine's cached profile, measured first "
        "(~2 min) when there is none; fresh = measure this machine's client path again now "
        "(~2 min) and cache it; cached = cached else shipped; shipped = deploy/calibration/.",
    ),
]  # fmt: skip
ThresholdOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold", metavar="EXPR",
        help="An SLO judged on the measured run, k6-style, added to the scenario's "
        "`thresholds:` (repeatable): 'p95 < 50ms', 'lost == 0', 'throughput >= 180/s', "
        "'work: p99 < 100ms'. A miss exits 6.",
    ),
]  # fmt: skip
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="PATH=VALUE",
        help="Change one scenario field before validation (repeatable), e.g. "
        "producers[0].count=4 or consumers[workers].prefetch=1.",
    ),
]  # fmt: skip
RateOpt = Annotated[
    str | None,
    typer.Option("--rate", "-r", metavar="RATE", help="Every producer's rate, e.g. 200/s "
                 "(poisson and constant arrivals; as PerfTest -r)."),
]  # fmt: skip
DurationOpt = Annotated[
    str | None,
    typer.Option("--duration", "-t", metavar="DURATION",
                 help="Load duration, e.g. 30s or 5m (as Locust -t, PerfTest -z)."),
]  # fmt: skip
ProducersOpt = Annotated[
    int | None,
    typer.Option("--producers", "-x", min=0, metavar="N",
                 help="Instances in every producer group (as PerfTest -x)."),
]  # fmt: skip
ConsumersOpt = Annotated[
    int | None,
    typer.Option("--consumers", "-y", min=0, metavar="N",
                 help="Instances in every consumer group (as PerfTest -y)."),
]  # fmt: skip


def parse_cli_thresholds(texts: list[str] | None) -> list[Threshold]:
    """``--threshold`` values → thresholds; a bad one is a usage error naming the option."""
    parsed = []
    for text in texts or []:
        try:
            parsed.append(parse_threshold(text))
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--threshold") from None
    return parsed


def threshold_table(results: list[ThresholdResult]) -> Table:
    """The thresholds judged on the measured run: a heading, then one row each, ✓ met or ✗
    missed."""
    met = sum(r.ok for r in results)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in (f"Thresholds (SLOs, measured run): {met} of {len(results)} met", "measured", ""):
        table.add_column(name, no_wrap=True)
    for r in results:
        mark = "[green]✓[/]" if r.ok else "[red]✗[/]"
        shown = Text(r.threshold.text)  # as written: no rich markup
        table.add_row(shown, format_limit(r.measured, r.threshold.spec.kind), mark)
    return table


def _judge(run_dir: Path, thresholds: list[Threshold]) -> list[ThresholdResult]:
    summary_path = run_dir / "analysis" / "summary.json"
    ledger_path = run_dir / "measured" / "ledger.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    ledger = json.loads(ledger_path.read_text()) if ledger_path.exists() else None
    return evaluate(thresholds, measured_figures(summary, ledger))


def _report(run_dir: Path, spark_master: str | None, as_json: bool) -> dict[str, Any]:
    from testbed.report.build import load_summary, report_after_run

    report = report_after_run(run_dir, spark_master=spark_master, console=err if as_json else out)
    verdict = load_summary(run_dir).get("verdict")
    return {"report": str(report), "prediction_accuracy": verdict}


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.", metavar="SCENARIO")],
    backend: BackendOpt = None,
    out_dir: OutOpt = Path("runs"),
    replications: ReplicationsOpt = None,
    rate: RateOpt = None,
    duration: DurationOpt = None,
    producers: ProducersOpt = None,
    consumers: ConsumersOpt = None,
    sets: SetOpt = None,
    threshold: ThresholdOpt = None,
    no_predict: Annotated[
        bool, typer.Option("--no-predict", help="Skip the paired prediction.")
    ] = False,
    workers: WorkersOpt = None,
    ui: Annotated[bool, typer.Option("--ui", help="Open Locust's web UI (127.0.0.1).")] = False,
    external_workers: ExternalOpt = 0,
    master_bind_host: MasterHostOpt = None,
    master_bind_port: MasterPortOpt = None,
    master_advertise: MasterAdvertiseOpt = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Skip the Spark analysis and report.html.")
    ] = False,
    spark_master: SparkOpt = None,
    home: HomeOpt = None,
    profile: ProfileOpt = None,
    calibration: CalibrationOpt = "auto",
    as_json: JsonOpt = False,
) -> None:
    """Run a scenario live (provision -> warm up -> load -> drain -> collect -> predict ->
    report), then judge its thresholds on the measured run (exit 6 when one misses)."""
    from testbed.core.scenario_loader import load_scenario
    from testbed.observe.exporter import ENV_SD_DIR
    from testbed.observe.prometheus import PrometheusServer
    from testbed.run import run_scenario

    extra = parse_cli_thresholds(threshold)
    overrides = RunOverrides(tuple(sets or ()), rate, duration, producers, consumers)
    with json_output(as_json) as doc:
        loaded = load_scenario(scenario, overrides)  # scenario errors before anything starts
        thresholds = [parse_threshold(t) for t in loaded.thresholds] + extra
        if no_report and needs_analysis(thresholds):
            shown = ", ".join(repr(t.text) for t in needs_analysis(thresholds))
            raise typer.BadParameter(
                f"{shown} need the analysis; drop --no-report", param_hint="--threshold"
            )
        _master_address(master_bind_host, master_bind_port, master_advertise)
        prometheus = PrometheusServer(testbed_home(home))
        if prometheus.running():  # started by `mqbed up --with-prometheus`: export to it
            os.environ.setdefault(ENV_SD_DIR, str(prometheus.sd_dir))
        result = run_scenario(
            scenario, home=testbed_home(home), out_dir=out_dir, backend=backend,
            replications=replications, predict=not no_predict, workers=workers, ui=ui,
            console=err, external_workers=external_workers, profile=profile,
            calibration=calibration, overrides=overrides,
        )  # fmt: skip
        doc.update(
            run_dir=str(result.run_dir), interrupted=result.interrupted,
            ledgers=[led.to_json() for led in result.ledgers], report=None,
            prediction_accuracy=None,
        )  # fmt: skip
        if not as_json:
            say(out, str(result))
        if not no_report:
            doc.update(_report(result.run_dir, spark_master, as_json))
        results = _judge(result.run_dir, thresholds)
        doc["thresholds"] = [r.to_json() for r in results]
        if results:
            (err if as_json else out).print(threshold_table(results))
        missed = [r.threshold.text for r in results if not r.ok]
        if missed:
            raise ThresholdMiss(f"{len(missed)} threshold(s) missed: {'; '.join(missed)}")


def _master_address(host: str | None, port: int | None, advertise: str | None) -> None:
    """Hand the master's bind address, port and advertised address to the Locust launcher
    (which reads them from the environment, as compose sets them)."""
    from testbed.workload.launcher import ENV_MASTER_ADVERTISE, ENV_MASTER_HOST, ENV_MASTER_PORT

    for name, value in ((ENV_MASTER_HOST, host), (ENV_MASTER_PORT, port),
                        (ENV_MASTER_ADVERTISE, advertise)):  # fmt: skip
        if value is not None:
            os.environ[name] = str(value)
