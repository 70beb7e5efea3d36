"""`mqbed calibrate` and `mqbed bench`: measuring this machine and the testbed itself."""

from __future__ import annotations

__all__ = ["calibrate", "bench"]

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from testbed.cli.app import HomeOpt, JsonOpt, app, out, progress, say, testbed_home
from testbed.cli.cmd_run import CalibrationOpt
from testbed.cli.output import json_output
from testbed.cli.renamed import old_spelling, renamed
from testbed.core.broker_kinds import ClientName, KindName
from testbed.exceptions import AccuracyMiss, MqbedError

QUICK_SCALE = 0.5
"""`calibrate --quick` stretches the client-path phases by this: ~66 s of load instead of ~122
(the first phase's 8 s of priming is never stretched)."""


CalQuickOpt = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="A smoke test: 2-second points, one repeat, three sizes (ignores --duration "
        f"and --repeats) and the client path at --scale {QUICK_SCALE:g} (~66 s of load). "
        "The profile is too rough for predictions, so --profile-out FILE is required: a quick "
        "calibration never goes into this machine's profile cache.",
    ),
]


ClientPathOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--client-path-only",
        help="Measure only the client path (~2 min) on top of the profile at --profile-out "
        "(or the shipped one).",
    ),
]


ScaleOpt = Annotated[
    float,
    typer.Option(
        min=0.2,
        max=20,
        metavar="X",
        help="Stretch the client-path phases (1 = ~122 s of load; 0.2-20).",
    ),
]
DrawsOpt = Annotated[
    int,
    typer.Option(
        min=1,
        max=5,
        metavar="N",
        help="Measure the client path N times in a row and pool the draws (each table by the "
        "median of its quantiles): N x ~2 min; 3 outvotes one slow draw (docs/accuracy.md).",
    ),
]


@app.command()
def calibrate(
    broker: Annotated[KindName, typer.Option(help="Broker kind.")],
    client: Annotated[
        ClientName | None,
        typer.Option(
            help="Client library: pika (default) or kombu for rabbitmq, stomp for activemq."
        ),
    ] = None,  # fmt: skip
    profile_out: Annotated[
        Path | None,
        typer.Option(
            "--profile-out",
            metavar="FILE",
            help="Output: the profile YAML file to write (default: this machine's cache, "
            "<home>/calibration/<host>-<broker>-<version>-<client>.yaml, which runs use; "
            "never deploy/calibration/ unless named here).",
        ),
    ] = None,  # fmt: skip
    old_out: Annotated[Path | None, old_spelling("--out", "FILE")] = None,
    duration: Annotated[
        float, typer.Option(min=1, metavar="SECONDS", help="Seconds per point after warm-up.")
    ] = 60,
    repeats: Annotated[int, typer.Option(min=1, metavar="N", help="Repetitions per point.")] = 3,
    quick: CalQuickOpt = False,
    client_path_only: ClientPathOnlyOpt = False,
    scale: ScaleOpt = 1.0,
    draws: DrawsOpt = 1,
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Calibrate a broker and client library on this machine -> a profile (docs/models.md §9).

    Ends with the goodness-of-fit table of the client path and, when it started the broker
    itself, the broker's restart time after a kill (the profile's restart_time)."""
    from testbed.calibrate import calibrate_machine, fit_table
    from testbed.calibration.api import calibrate_endpoint
    from testbed.core.profile import load_profile
    from testbed.run import replicate_on

    out_file = renamed(profile_out, old_out, command="calibrate", was="--out", now="--profile-out")
    # the machine's cache is what `mqbed run --calibration auto|cached` predicts with
    if quick and out_file is None:
        raise typer.BadParameter(
            "a quick calibration is a smoke test, too rough for predictions: give the profile "
            "file to write (--profile-out FILE); it is never written into this machine's "
            "profile cache",
            param_hint="--quick",
        )

    def micro(path: Path, endpoint: Any) -> Path:
        return calibrate_endpoint(
            endpoint, path, duration=duration, repeats=repeats, quick=quick, progress=progress
        )

    with json_output(as_json) as doc:
        path, cp = calibrate_machine(
            broker,
            client=client,
            home=testbed_home(home),
            out=out_file,
            micro=None if client_path_only else micro,
            scale=QUICK_SCALE if quick else scale,
            replicate_on=replicate_on,
            console_line=progress,
            draws=draws,
        )
        doc["profile"] = str(path)
        doc["draws"] = draws
        doc["fit"] = [{"point": f.point, "n": f.n, "ks": f.ks} for f in cp.fit]
        restart = load_profile(path).restart_time
        doc["restart_time"] = restart.model_dump() if restart is not None else None
        if not as_json:
            _show_calibration(fit_table(cp), restart, path)


def _show_calibration(fit: list[str], restart: Any, path: Path) -> None:
    """What `mqbed calibrate` prints without --json: the fit table, the restart, the file."""
    for line in fit:
        say(out, line)
    if restart is not None:
        say(out, f"broker restart (kill -> healthy): {restart.mean:.1f} s "
                 f"(sd {restart.sd:.1f} s, {restart.samples} kills)")  # fmt: skip
    if restart is not None and restart.ack_loss_s is not None:
        say(out, f"acks a kill forgets: {restart.ack_loss_s * 1000:.0f} ms of them "
                 f"({restart.acks_forgotten} acks at 100 msg/s)")  # fmt: skip
    say(out, f"wrote {path}")


def _performance(
    out_file: Path | None, quick: bool, only: list[str] | None, doc: dict[str, Any]
) -> None:
    """The performance suite: docs/performance.md, and its figures in the --json document
    (``performance``); a failed benchmark fails the command once the report is written."""
    from testbed.bench import ROOT, run_benchmarks

    target = out_file or ROOT / "docs" / "performance.md"
    perf = run_benchmarks(target, quick=quick, only=only, progress=progress)
    doc["written"].append(str(target))
    doc["performance"] = perf
    progress(f"wrote {target}")
    if perf["failed"]:
        raise MqbedError(f"benchmark(s) failed: {', '.join(perf['failed'])}; see {target}")


def _accuracy(
    target: Path, only: list[str] | None, options: dict[str, Any], doc: dict[str, Any]
) -> None:
    """The accuracy suite; AccuracyMiss (exit 5) when a case missed, unless told not to."""
    from testbed.accuracy import accuracy_misses, run_accuracy
    from testbed.accuracy_doc import shown_command

    report_only = options.pop("report_only")
    path = run_accuracy(
        target,
        only=only,
        command=shown_command(["mqbed", "bench", *sys.argv[2:]]),
        progress=progress,
        **options,
    )
    doc["written"] += [str(path), str(path.with_suffix(".json"))]
    progress(f"wrote {path} and {path.with_suffix('.json')}")
    missing = accuracy_misses(path.with_suffix(".json"))
    doc["misses"] = missing
    if missing and not (report_only or options["quick"]):
        raise AccuracyMiss(
            f"{len(missing)} case(s) missed (outside target and measured interval): "
            + "; ".join(missing)
            + f" — see the overview in {path} (--report-only exits 0)"
        )


ReuseOpt = Annotated[
    bool,
    typer.Option(
        "--reuse",
        help="accuracy: judge the runs already under --out again (analysis rebuilt, no live runs)",
    ),
]


ReportOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--report-only",
        help="accuracy: exit 0 even when a case misses (a metric outside its target and "
        "its measured interval); without it such a miss exits 5. --quick never fails on "
        "numbers.",
    ),
]


BenchOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Output: the parent directory; the accuracy suite creates its run directories "
        "(and scenario copies) inside it, as run --out (default runs/accuracy-<utc>).",
    ),
]
ReportOpt = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="FILE",
        help="Output: the report file (default docs/<suite>.md; one suite only; the accuracy "
        "JSON goes beside it).",
    ),
]


def _bench_outputs(
    out_dir: Path | None, report: Path | None, old_runs: Path | None
) -> tuple[Path | None, Path | None]:
    """(report file, runs' parent) from the options and their old spellings: ``--runs DIR``
    (now ``--out DIR``) and ``--out FILE.md`` (the report file, now ``--report FILE``). A
    report is always markdown, so an --out ending in .md is an old script's report file."""
    if out_dir is not None and out_dir.suffix == ".md":
        report = renamed(report, out_dir, command="bench", was="--out FILE.md", now="--report")
        out_dir = None
    return report, renamed(out_dir, old_runs, command="bench", was="--runs", now="--out")


@app.command()
def bench(
    suite: Annotated[
        str,  # checked below, with the message a test pins
        typer.Option(
            "--suite",
            metavar="{performance|accuracy|all}",
            help="performance (figures -> docs/performance.md) | accuracy (the scenario library "
            "live and predicted -> docs/accuracy.md) | all",
        ),
    ] = "performance",
    quick: Annotated[
        bool, typer.Option("--quick", help="Short variants: checks the machinery, not numbers.")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            metavar="NAME",
            help="performance: workload | simulator | fault-proxy | correlation; accuracy: a "
            "case name or scenario file fragment (repeatable)",
        ),
    ] = None,  # fmt: skip
    report: ReportOpt = None,
    out_dir: BenchOutOpt = None,
    old_runs: Annotated[Path | None, old_spelling("--runs", "DIR")] = None,
    replications: Annotated[
        int | None,
        typer.Option(
            min=1, metavar="N", help="accuracy: replications per scenario (default 3; --quick 1)."
        ),
    ] = None,
    reuse: ReuseOpt = False,
    report_only: ReportOnlyOpt = False,
    calibration: CalibrationOpt = "auto",
    home: HomeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the benchmark suites and write docs/performance.md and/or docs/accuracy.md."""
    from testbed.bench import ROOT

    if suite not in ("performance", "accuracy", "all"):
        raise typer.BadParameter(f"--suite {suite!r}: choose performance, accuracy or all")
    out_file, runs = _bench_outputs(out_dir, report, old_runs)
    if out_file is not None and suite == "all":
        raise typer.BadParameter("--report names one report; use it with one --suite")
    if runs is not None and suite == "performance":
        raise typer.BadParameter(
            "--out DIR is the parent of the accuracy suite's runs; the performance suite makes "
            "none (its report file is --report FILE)"
        )
    with json_output(as_json) as doc:
        doc.update(suite=suite, written=[], misses=[])
        if suite in ("performance", "all"):
            _performance(out_file, quick, only if suite == "performance" else None, doc)
        if suite in ("accuracy", "all"):
            options = dict(quick=quick, home=testbed_home(home), runs_dir=runs, reuse=reuse,
                           replications=replications, report_only=report_only,
                           calibration=calibration)  # fmt: skip
            target = out_file or ROOT / "docs" / "accuracy.md"
            _accuracy(target, only if suite == "accuracy" else None, options, doc)
        if not as_json:
            for written in doc["written"]:
                say(out, f"wrote {written}")
