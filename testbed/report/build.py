"""Build reports for run directories: Spark analysis, then the pages.

    build_report([Path("runs/20261121T063114Z-quickstart")])      # -> [.../report.html]

For each run: ``analysis/`` (windows.parquet, summary.json, ...), ``report.html`` and
``summary.md``. With several runs, also a cross-run table in the first run's parent directory:
``runs-summary.html`` and ``runs-summary.md``. A run without ``predicted/`` still gets its
report (measured figures; the verdict says "no prediction").

One Spark session serves every run (a session that is already active is reused and left
running; one started here is stopped, JVM included, before the plots are drawn).
"""

from __future__ import annotations

__all__ = ["build_report", "report_after_run", "load_summary", "RUNS_SUMMARY"]

import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.analysis.job import RunAnalysis, analyse_run
from testbed.analysis.session import spark_scope
from testbed.report.markdown import runs_html, runs_markdown, summary_markdown
from testbed.report.page import write_report
from testbed.report.verdict import print_verdict

RUNS_SUMMARY = "runs-summary"


def _write(path: Path, text: str) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def build_report(
    run_dirs: list[Path],
    *,
    spark_master: str | None = None,
    console: Console | None = None,
) -> list[Path]:
    """Analyse each run and write its ``report.html`` + ``summary.md``; returns the report
    paths in the order given. Progress goes to `console` (stderr by default)."""
    console = console or Console(stderr=True, emoji=False)
    run_dirs = [Path(d) for d in run_dirs]
    analyses: list[RunAnalysis] = []
    t0 = time.monotonic()
    with spark_scope(spark_master) as spark:
        console.print(f"spark ready after {time.monotonic() - t0:.1f}s", markup=False)
        for i, run_dir in enumerate(run_dirs, 1):
            t = time.monotonic()
            analyses.append(analyse_run(spark, run_dir))
            console.print(
                f"analysed {i}/{len(run_dirs)} {run_dir.name} in {time.monotonic() - t:.1f}s",
                markup=False,
            )
    reports = []
    for analysis in analyses:
        reports.append(write_report(analysis))
        _write(analysis.run_dir / "summary.md", summary_markdown(analysis.summary))
    if len(analyses) > 1:
        base = run_dirs[0].resolve().parent
        summaries = [a.summary for a in analyses]
        _write(base / f"{RUNS_SUMMARY}.md", runs_markdown(summaries))
        _write(
            base / f"{RUNS_SUMMARY}.html",
            runs_html(summaries, [r.resolve() for r in reports], base),
        )
    console.print(f"reports written in {time.monotonic() - t0:.1f}s", markup=False)
    return reports


def load_summary(run_dir: Path) -> dict[str, Any]:
    """``<run_dir>/analysis/summary.json`` as written by the last analysis."""
    data: dict[str, Any] = json.loads(
        (Path(run_dir) / "analysis" / "summary.json").read_text(encoding="utf-8")
    )
    return data


def report_after_run(
    run_dir: Path, *, spark_master: str | None = None, console: Console | None = None
) -> Path:
    """The end of ``mqbed run``: build the run's report, print its verdict table, return
    the path of ``report.html``."""
    console = console or Console(emoji=False)
    (report,) = build_report(
        [run_dir], spark_master=spark_master, console=Console(stderr=True, quiet=console.quiet)
    )
    print_verdict(load_summary(run_dir), console)
    console.print(f"report: {report}", markup=False)
    return report
