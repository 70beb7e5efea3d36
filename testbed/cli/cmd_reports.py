"""`mqbed report`, `mqbed compare` and `mqbed sweep`: Spark analyses and their pages."""

from __future__ import annotations

__all__ = ["compare", "report", "sweep"]

from pathlib import Path
from typing import Annotated

import typer

from testbed.cli.app import HomeOpt, JsonOpt, SparkOpt, app, err, out, say, testbed_home
from testbed.cli.cmd_run import ProfileOpt
from testbed.cli.output import json_output
from testbed.cli.renamed import old_spelling, renamed


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run directories.", metavar="RUN_DIR...")],
    spark_master: SparkOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """(Re)build the analysis, report.html and summary.md of runs (+ a cross-run table)."""
    from testbed.report.build import RUNS_SUMMARY, build_report, load_summary
    from testbed.report.verdict import print_verdict

    missing = [str(d) for d in run_dirs if not (d / "measured").is_dir()]
    if missing:
        raise typer.BadParameter(f"not run directories (no measured/): {', '.join(missing)}")
    with json_output(as_json) as doc:
        reports = build_report(run_dirs, spark_master=spark_master, console=err)
        doc["runs"] = runs = []
        for run_dir, path in zip(run_dirs, reports, strict=True):
            summary = load_summary(run_dir)
            runs.append(
                {
                    "run_dir": str(run_dir),
                    "report": str(path),
                    "summary": str(run_dir / "analysis" / "summary.json"),
                    "prediction_accuracy": summary.get("verdict"),
                }
            )
            if not as_json:
                print_verdict(summary, out)
                say(out, f"report: {path}")
        if len(run_dirs) > 1:
            doc["runs_summary"] = str(run_dirs[0].resolve().parent / f"{RUNS_SUMMARY}.html")


@app.command()
def compare(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(help="Run directories; the first is the baseline.", metavar="RUN_DIR..."),
    ],
    page_dir: Annotated[
        Path | None,
        typer.Option(
            "--page-dir",
            metavar="DIR",
            help="Output: the directory compare.html, compare.md and compare.json go to "
            "(default: none written, the table only).",
        ),
    ] = None,
    old_out: Annotated[Path | None, old_spelling("--out", "DIR")] = None,
    level: Annotated[
        float,
        typer.Option(min=0.5, max=0.999, metavar="P", help="Joint confidence of the intervals."),
    ] = 0.95,
    spark_master: SparkOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare measured runs: per metric both values, the difference and a bootstrap interval
    of it, significant or not (docs/compare.md)."""
    from testbed.compare import compare_runs

    out_dir = renamed(page_dir, old_out, command="compare", was="--out", now="--page-dir")
    with json_output(as_json) as doc:
        doc.update(compare_runs(run_dirs, out_dir, err, level=level, spark_master=spark_master))


@app.command()
def sweep(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.", metavar="SCENARIO")],
    sets: Annotated[
        list[str],
        typer.Option(
            "--set",
            metavar="PATH=SPEC",
            help="A grid axis (repeatable; several make a Cartesian grid): "
            "PATH=START:STOP:STEP, e.g. producers[0].count=5:40:5 or "
            "producers[0].arrival.rate=50/s:200/s:50/s, or PATH=V1,V2,...",
        ),
    ],
    sla_p95: Annotated[
        str,
        typer.Option(metavar="DURATION", help="p95 latency target for the SLA capacity."),
    ] = "100ms",
    replications: Annotated[
        int, typer.Option(min=1, metavar="N", help="Replications per point.")
    ] = 1,
    no_predict: Annotated[
        bool, typer.Option("--no-predict", help="Skip the paired predictions.")
    ] = False,
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Output: the parent directory; the sweep creates a new sweep directory inside "
            "it (as run --out and bench --out).",
        ),
    ] = Path("runs"),
    spark_master: SparkOpt = None,
    home: HomeOpt = None,
    profile: ProfileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run every grid point live and predicted; curves, saturation point, SLA capacity."""
    from testbed.core.units import parse_duration
    from testbed.sweep import sweep as run_sweep

    try:
        target = parse_duration(sla_p95)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--sla-p95") from e
    with json_output(as_json) as doc:
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
            profile=profile,
        )
        doc.update(sweep_dir=str(path), sweep_json=str(path / "sweep.json"))
        doc["page"] = str(path / "sweep.html")
        if not as_json:
            say(out, f"sweep report: {path}")
