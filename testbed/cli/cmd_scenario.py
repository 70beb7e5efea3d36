"""`mqbed validate` and `mqbed predict`: scenario files, no broker."""

from __future__ import annotations

__all__ = ["validate", "predict"]

import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from testbed.cli import exit_codes
from testbed.cli.app import HomeOpt, JsonOpt, app, err, out, progress, say, testbed_home
from testbed.cli.output import json_output
from testbed.cli.renamed import old_spelling, renamed
from testbed.exceptions import ScenarioIssue


def _validate_one(f: Path) -> tuple[object, list[ScenarioIssue]]:
    from testbed.core.scenario_loader import validate_file

    try:
        return validate_file(f)
    except Exception as e:  # a loader bug must not hide the other files' results
        message = (
            f"internal error while checking this file ({type(e).__name__}: {e}); please report"
        )
        return None, [ScenarioIssue(str(f), 1, "", message[:300])]


def _file_report(f: Path, scenario: object, issues: list[ScenarioIssue]) -> dict[str, Any]:
    errors = [i for i in issues if i.severity == "error"]
    return {
        "file": str(f),
        "ok": scenario is not None and not errors,
        "issues": [
            {"line": i.line, "path": i.path, "message": i.message, "severity": i.severity}
            for i in issues
        ],
    }


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Scenario YAML files.", metavar="FILE...")],
    as_json: JsonOpt = False,
) -> None:
    """Check scenario files: every error with file:line, field, value and a suggestion.

    Each file is checked and reported on its own; the exit code is 3 if any file is bad."""
    with json_output(as_json) as doc:
        doc["files"] = reports = []
        for f in files:
            scenario, issues = _validate_one(f)
            report = _file_report(f, scenario, issues)
            reports.append(report)
            if not as_json:
                for i in issues:
                    say(err, str(i))
                if report["ok"]:
                    say(out, f"ok: {f}")
        failed = not all(r["ok"] for r in reports)
        if failed:
            raise typer.Exit(exit_codes.SCENARIO)


@app.command()
def predict(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.", metavar="SCENARIO")],
    method: Annotated[
        Literal["simulate", "analytic"],
        typer.Option(help="simulate: the SimPy model; analytic: closed forms."),
    ] = "simulate",
    profile: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Calibration profile (default: this machine's cached profile for the broker "
            "and client library, else deploy/calibration/<kind>[-<client>]-local.yaml).",
        ),
    ] = None,
    replications: Annotated[
        int | None,
        typer.Option(min=1, metavar="N", help="Replications (default: the scenario's)."),
    ] = None,
    home: HomeOpt = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "--processes",
            min=1,
            metavar="N",
            help="Worker processes simulating replications in parallel (as run --workers).",
        ),
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            metavar="DIR",
            help="Output: the run directory itself (a measured run's, or a new one), not its "
            "parent; the prediction goes to DIR/predicted/ (default: a new "
            "runs/<utc>-<scenario>-predicted).",
        ),
    ] = None,
    old_out: Annotated[Path | None, old_spelling("--out", "DIR")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict a run from its scenario and a calibration profile only (never measurements)."""
    from emulator.predict import predict as run_predict
    from testbed.calibration.choice import profile_without_broker
    from testbed.core.scenario_loader import load_scenario

    out_dir = renamed(run_dir, old_out, command="predict", was="--out", now="--run-dir")
    with json_output(as_json) as doc:
        s = load_scenario(scenario)
        choice = profile_without_broker(s, testbed_home(home), profile)
        progress(f"profile: {choice.path} ({choice.origin})")
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = out_dir or Path("runs") / f"{stamp}-{s.name}-predicted"
        res = run_predict(
            s,
            target,
            method=method,
            profile=choice.profile,
            replications=replications,  # type: ignore[arg-type]
            processes=workers,
            progress=progress,
            profile_info=choice.describe(),
        )
        doc.update(res.summary)
        if not as_json:
            say(out, str(res))
