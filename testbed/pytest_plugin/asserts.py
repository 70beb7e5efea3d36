"""Assertions on an `MqbedResult` that fail with the table a person wants to read.

- `assert_verdicts(result)`: the prediction matched the measured run — every judged whole-run
  metric of ``summary.json`` within its target; the failure shows the verdict table
  (`testbed.report.verdict`), as ``mqbed run`` prints it.
- `assert_thresholds(result, "p95 < 50ms", "lost == 0", "work: p99 < 100ms")`: the measured
  run meets your service levels, written as a scenario's ``thresholds:`` are
  (`testbed.core.thresholds`: ``[QUEUE:] METRIC OP VALUE``; ledger counts are summed over
  replications).
"""

from __future__ import annotations

__all__ = ["assert_thresholds", "assert_verdicts", "parse_threshold"]

from collections.abc import Iterable
from dataclasses import asdict

from testbed.core.thresholds import (
    evaluate,
    format_limit,
    measured_figures,
    needs_analysis,
    parse_threshold,
)
from testbed.pytest_plugin.runs import MqbedResult


def assert_thresholds(result: MqbedResult, *thresholds: str | Iterable[str]) -> None:
    """Every threshold holds on the measured run; else `AssertionError` with a table of all
    of them (measured value, ✓/✗). A metric the run has no value for counts as missed.

    The thresholds are those of a scenario's ``thresholds:`` and ``mqbed run --threshold``
    (`testbed.core.thresholds`: one parser, one judge)."""
    __tracebackhide__ = True
    texts = [t for item in thresholds for t in ([item] if isinstance(item, str) else item)]
    if not texts:
        raise ValueError("assert_thresholds: no threshold given")
    parsed = [parse_threshold(t) for t in texts]
    if result.summary is None and needs_analysis(parsed):
        raise ValueError(
            f"thresholds {[t.text for t in needs_analysis(parsed)]} need the run's analysis: "
            "call mqbed_run(..., report=True)"
        )
    judged = evaluate(parsed, measured_figures(result.summary, asdict(result.ledger)))
    missed = sum(not r.ok for r in judged)
    if missed:
        width = max(len(r.threshold.text) for r in judged)
        lines = [
            f"  {'✓' if r.ok else '✗'} {r.threshold.text:<{width}}  measured "
            f"{format_limit(r.measured, r.threshold.spec.kind)}"
            for r in judged
        ]
        raise AssertionError(
            f"mqbed: {missed} of {len(judged)} threshold(s) missed by run {result.run_dir.name}\n"
            + "\n".join(lines)
            + f"\nrun directory: {result.run_dir}"
        )


def assert_verdicts(result: MqbedResult, metrics: Iterable[str] | None = None) -> None:
    """The paired prediction matched the run: every judged whole-run metric (or those named in
    `metrics`, by ``summary.json`` name or table label) within its target. Fails, with the
    verdict table, also when nothing was judged (no prediction, no analysis)."""
    __tracebackhide__ = True
    if result.summary is None:
        raise AssertionError(
            f"mqbed: run {result.run_dir.name} was not analysed (report=False): no verdicts"
        )
    rows = [r for r in result.verdicts if r.queue == "all"]
    if metrics is not None:
        wanted = set(metrics)
        unknown = wanted - {r.metric for r in rows} - {r.label for r in rows}
        if unknown:
            raise ValueError(f"assert_verdicts: no metric {sorted(unknown)} in the verdicts")
        rows = [r for r in rows if r.metric in wanted or r.label in wanted]
    judged = [r for r in rows if r.within is not None]
    failed = [r for r in judged if not r.within]
    if failed or not judged:
        why = (
            f"{len(failed)} of {len(judged)} judged metric(s) outside their target: "
            + ", ".join(r.label for r in failed)
            if judged
            else "nothing was judged (no prediction: mqbed_run(..., predict=True))"
        )
        raise AssertionError(
            f"mqbed: prediction accuracy of run {result.run_dir.name}: {why}\n"
            f"{result.verdict_table()}\nreport: {result.report}"
        )
