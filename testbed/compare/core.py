"""``compare_runs``: measured runs side by side, each against the first (the baseline).

    doc = compare_runs([Path("runs/A"), Path("runs/B")], Path("cmp"), Console(stderr=True))
    doc["comparisons"][0]["metrics"]   # per metric: both values, difference, interval, ...

Spark reduces every run (:mod:`testbed.compare.runs`, the report's metric definitions); the
intervals are computed on the driver (:mod:`testbed.compare.intervals`). The returned dict is
the JSON document ``--json`` prints (keys are only ever added):

    {"level", "per_metric_level", "resamples", "baseline", "warnings": [...],
     "runs": [{"run_id", "run_dir", "scenario", "replications", "window_s"}],
     "comparisons": [{"baseline", "other", "same_scenario", "same_settings",
                      "significant": [metric, ...],
                      "metrics": [{"metric", "label", "unit", "baseline", "other",
                                   "difference", "rel_difference", "interval",
                                   "method", "resampled", "significant"}]}],
     "files": {"html", "markdown", "json"}}

Values are means over each run's replications; ``difference`` is other − baseline,
``rel_difference`` that over ``|baseline|`` (null when the baseline is 0); ``interval`` the
simultaneous bootstrap interval of the difference, ``method`` how it was found (``replications``,
``blocks``, ``poisson``), ``resampled`` what was resampled, in words.
"""

from __future__ import annotations

__all__ = ["COMPARED", "compare_runs"]

import json
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from testbed.analysis.session import spark_scope
from testbed.analysis.summary import JUDGED
from testbed.compare.intervals import (
    MIN_REPLICATIONS,
    RESAMPLES,
    bonferroni_level,
    diff_interval,
)
from testbed.compare.runs import MeasuredRun, check_run_dir, load_measured
from testbed.compare.table import LABELS, UNITS, markdown_table, print_table
from testbed.exceptions import ConfigurationError

COMPARED = list(JUDGED)
"""The metrics compared: the report's verdict metrics (throughput, latency mean/p50/p95/p99,
queue depth, losses, duplicates)."""


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _metric_entry(
    baseline: MeasuredRun, other: MeasuredRun, metric: str, level: float
) -> dict[str, Any]:
    a, b = _mean(baseline.values(metric)), _mean(other.values(metric))
    diff = None if a is None or b is None else b - a
    rel = None if diff is None or not a else diff / abs(a)
    ci = diff_interval(baseline, other, metric, level)
    return {
        "metric": metric,
        "label": LABELS[metric],
        "unit": UNITS[metric][0],
        "baseline": a,
        "other": b,
        "difference": diff,
        "rel_difference": rel,
        "interval": None if ci.low is None or ci.high is None else [ci.low, ci.high],
        "method": ci.method,
        "resampled": ci.detail,
        "significant": ci.significant,
    }


def _comparison(baseline: MeasuredRun, other: MeasuredRun, level: float) -> dict[str, Any]:
    metrics = [_metric_entry(baseline, other, m, level) for m in COMPARED]
    return {
        "baseline": baseline.run_id,
        "other": other.run_id,
        "same_scenario": baseline.scenario == other.scenario,
        "same_settings": baseline.scenario_digest == other.scenario_digest,
        "significant": [m["metric"] for m in metrics if m["significant"]],
        "metrics": metrics,
    }


def _warnings(runs: list[MeasuredRun]) -> list[str]:
    base = runs[0]
    out = []
    few = [r.run_id for r in runs if len(r.replications) < MIN_REPLICATIONS]
    if few:
        # Slices of one run hold the noise within that run, not between runs: two seeds of
        # one 3.5-s RabbitMQ scenario, run a minute apart on an idle machine, came out with
        # medians of 1.74 and 1.14 ms, "significant" by the slices of each run.
        out.append(
            f"{', '.join(few)}: fewer than {MIN_REPLICATIONS} replications, so the intervals "
            "resample slices within each run; they hold the noise inside a run but not from "
            "one run to the next (machine state, broker warm-up), and a difference between "
            f"single runs may be the machine's. Set replications: {MIN_REPLICATIONS} or more "
            "to judge a change across runs"
        )
    for run in runs[1:]:
        if run.scenario != base.scenario:
            out.append(
                f"{run.run_id} ran scenario '{run.scenario}', the baseline {base.run_id} "
                f"'{base.scenario}': compared anyway, but a difference may come from the "
                "scenarios rather than from what you changed"
            )
    return out


def _write(path: Path, text: str) -> Path:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def _check_dirs(run_dirs: Sequence[Path]) -> list[Path]:
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) < 2:
        raise ConfigurationError(
            f"compare needs at least two run directories, got {len(dirs)}: "
            "the first is the baseline, every other one is compared with it"
        )
    seen: dict[Path, Path] = {}
    for d in dirs:
        check_run_dir(d)
        key = d.resolve()
        if key in seen:
            raise ConfigurationError(f"{d} is given twice (as {seen[key]} too)")
        seen[key] = d
    return dirs


def compare_runs(
    run_dirs: Sequence[Path],
    out: Path | None,
    console: Console,
    *,
    level: float = 0.95,
    spark_master: str | None = None,
) -> dict[str, Any]:
    """Compare measured runs, each with the first; the JSON document (module docstring).

    With `out`, also writes ``compare.html``, ``compare.md`` and ``compare.json`` there.
    Progress, warnings and the table go to `console`. Raises ConfigurationError for fewer than
    two runs, a directory that is not a run, or a run without measured data.
    """
    if not 0.5 <= level < 1.0:
        raise ConfigurationError(f"level {level}: expected a confidence level in [0.5, 1)")
    dirs = _check_dirs(run_dirs)
    per_metric = bonferroni_level(level, len(COMPARED))
    t0 = time.monotonic()
    runs: list[MeasuredRun] = []
    with spark_scope(spark_master) as spark:
        console.print(f"spark ready after {time.monotonic() - t0:.1f}s", markup=False)
        for i, d in enumerate(dirs, 1):
            t = time.monotonic()
            runs.append(load_measured(spark, d))
            console.print(
                f"read {i}/{len(dirs)} {d.name} in {time.monotonic() - t:.1f}s", markup=False
            )
    warnings = _warnings(runs)
    for w in warnings:
        console.print(f"warning: {w}", markup=False, style="yellow")
    doc: dict[str, Any] = {
        "level": level,
        "per_metric_level": per_metric,
        "resamples": RESAMPLES,
        "baseline": runs[0].run_id,
        "warnings": warnings,
        "runs": [
            {
                "run_id": r.run_id,
                "run_dir": str(r.run_dir),
                "scenario": r.scenario,
                "replications": len(r.replications),
                "window_s": r.window_s,
            }
            for r in runs
        ],
        "comparisons": [_comparison(runs[0], r, per_metric) for r in runs[1:]],
        "files": {},
    }
    print_table(doc, console)
    if out is not None:
        from testbed.compare.page import render_page

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "html": out / "compare.html",
            "markdown": out / "compare.md",
            "json": out / "compare.json",
        }
        doc["files"] = {k: str(v) for k, v in files.items()}
        _write(files["html"], render_page(doc, runs))
        _write(files["markdown"], markdown_table(doc))
        _write(files["json"], json.dumps(doc, indent=2, allow_nan=False) + "\n")
        console.print(f"comparison written to {files['html']}", markup=False)
    return doc
