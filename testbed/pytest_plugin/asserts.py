"""Assertions on an `MqbedResult` that fail with the table a person wants to read.

- `assert_verdicts(result)`: the prediction matched the measured run — every judged whole-run
  metric of ``summary.json`` within its target; the failure shows the verdict table
  (`testbed.report.verdict`), as ``mqbed run`` prints it.
- `assert_thresholds(result, "p95 < 50ms", "lost == 0", "work: p99 < 100ms")`: the measured
  run meets your service levels. ``[QUEUE:] METRIC OP VALUE``, OP one of ``< <= > >= == !=``;
  METRIC one of ``throughput`` (a rate: ``180/s``), ``mean``, ``p50``, ``p95``, ``p99`` (latency:
  ``50ms``), ``depth`` (mean queue depth, messages), a ledger count (``lost``, ``duplicated``,
  ``sent``, ``confirmed``, ``delivered_unique``, ``redeliveries``, ``dead_lettered``,
  ``unexpected``, ``recovered``: whole run, summed over replications; per queue ``lost`` and
  ``duplicated`` come from the analysis), or any ``summary.json`` metric name.
"""

from __future__ import annotations

__all__ = ["Threshold", "assert_thresholds", "assert_verdicts", "parse_threshold"]

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from testbed.core.records import Ledger
from testbed.core.units import parse_duration, parse_rate
from testbed.pytest_plugin.runs import MqbedResult

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}  # fmt: skip
_FORM = re.compile(
    r"^\s*(?:(?P<queue>\S+?)\s*:\s*)?(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(?P<op><=|>=|==|!=|<|>)\s*(?P<value>\S+)\s*$"
)
_LATENCY = {"mean": "latency_mean_s", "p50": "latency_p50_s", "p95": "latency_p95_s",
            "p99": "latency_p99_s"}  # fmt: skip
_ALIASES = {**_LATENCY, "throughput": "throughput_msg_s", "depth": "queue_depth_mean"}
_PER_QUEUE_COUNTS = {"lost": "losses", "duplicated": "duplicates"}
_LEDGER = tuple(f.name for f in fields(Ledger))


@dataclass(frozen=True)
class Threshold:
    text: str
    queue: str | None
    metric: str
    """A ``summary.json`` metric, or ``ledger.<field>``."""
    op: str
    value: float


def _number(text: str, metric: str, source: str) -> float:
    try:
        if metric == "throughput_msg_s":
            return parse_rate(text)
        if metric.endswith("_s"):
            return parse_duration(text)
        return float(text)
    except ValueError as exc:
        raise ValueError(f"threshold {source!r}: bad value {text!r}: {exc}") from None


def parse_threshold(text: str) -> Threshold:
    """``"p95 < 50ms"`` → `Threshold`; `ValueError` naming the text and the accepted forms."""
    m = _FORM.match(text)
    if m is None:
        raise ValueError(
            f"threshold {text!r}: expected [QUEUE:] METRIC OP VALUE, e.g. 'p95 < 50ms', "
            "'lost == 0', 'work: throughput >= 180/s'"
        )
    queue, name = m.group("queue"), m.group("metric")
    if name in _LEDGER and not (queue and name in _PER_QUEUE_COUNTS):
        if queue:
            raise ValueError(f"threshold {text!r}: {name} is counted for the whole run only")
        metric = f"ledger.{name}"
    elif queue and name in _PER_QUEUE_COUNTS:
        metric = _PER_QUEUE_COUNTS[name]
    else:
        metric = _ALIASES.get(name, name)
    value = _number(m.group("value"), metric, text)
    return Threshold(text.strip(), queue, metric, m.group("op"), value)


def _measured(result: MqbedResult, t: Threshold) -> float | None:
    if t.metric.startswith("ledger."):
        return float(getattr(result.ledger, t.metric.removeprefix("ledger.")))
    if result.summary is None:
        raise ValueError(
            f"threshold {t.text!r} needs the run's analysis: call mqbed_run(..., report=True)"
        )
    return result.measured(t.metric, t.queue)


def _shown(value: float | None, metric: str) -> str:
    from testbed.report.verdict import fmt_value

    if metric.startswith("ledger."):
        return f"{value:g} msgs" if value is not None else "–"
    return fmt_value(value, metric)


def assert_thresholds(result: MqbedResult, *thresholds: str | Iterable[str]) -> None:
    """Every threshold holds on the measured run; else `AssertionError` with a table of all
    of them (measured value, ✓/✗). A metric the run has no value for counts as missed."""
    __tracebackhide__ = True
    texts = [t for item in thresholds for t in ([item] if isinstance(item, str) else item)]
    if not texts:
        raise ValueError("assert_thresholds: no threshold given")
    parsed = [parse_threshold(t) for t in texts]
    rows, missed = [], 0
    for t in parsed:
        value = _measured(result, t)
        ok = value is not None and _OPS[t.op](value, t.value)
        missed += not ok
        rows.append((("✓" if ok else "✗"), t.text, _shown(value, t.metric)))
    if missed:
        width = max(len(r[1]) for r in rows)
        lines = [f"  {mark} {text:<{width}}  measured {value}" for mark, text, value in rows]
        raise AssertionError(
            f"mqbed: {missed} of {len(rows)} threshold(s) missed by run {result.run_dir.name}\n"
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
