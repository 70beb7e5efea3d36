"""SLO thresholds, k6-style: ``p95 < 50ms``, ``lost == 0``, ``throughput >= 180/s``,
``work: p99 < 100ms`` (one queue). Judged on the MEASURED run only — never on the prediction.

A threshold is ``[QUEUE:] METRIC OP VALUE``:

- METRIC (:data:`METRICS`): latencies ``mean``/``avg``, ``p50``/``med``, ``p95``, ``p99``
  (publish → consumer start, the report's latency; the VALUE needs a time unit: ``50ms``,
  ``0.2s``); ``throughput`` (acks per second, ``180/s``, ``3000/min`` or a bare number per
  second); ``queue_depth`` (mean messages published and not yet settled, the report's queue
  depth); and the ledger's counts ``sent``, ``confirmed``, ``delivered``,
  ``lost``, ``duplicated``, ``unexpected``, ``recovered``, ``redeliveries``, ``dead_lettered``,
  ``unroutable``, ``order_violations`` (plain numbers, whole run only).
- OP: ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``.
- QUEUE (optional, a queue name without ``:``): judge that queue's figure instead of the whole
  run's (latencies, throughput and queue depth only).

What is judged: latencies, throughput and queue depth are the analysis' measured figures
(``analysis/summary.json``: the median over replications, as in the verdict table); counts are
the run's ledger (``measured/ledger.json``: summed over replications). A threshold whose figure
was not measured (no analysis, an idle queue) misses: it could not be shown to hold.

Pure functions only: the CLI reads the files and prints the table.
"""

from __future__ import annotations

__all__ = [
    "METRICS",
    "Metric",
    "Threshold",
    "ThresholdResult",
    "parse_threshold",
    "measured_figures",
    "evaluate",
    "needs_analysis",
    "format_limit",
]

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.core.suggest import did_you_mean
from testbed.core.units import parse_duration, parse_rate


@dataclass(frozen=True)
class Metric:
    key: str
    """Where the figure is: a ``summary.json`` metric name, or a ``ledger.json`` key."""
    kind: str
    """``latency`` (seconds), ``rate`` (per second), ``depth`` (messages) or ``count``."""
    source: str
    """``analysis`` or ``ledger``."""


_LATENCY = {"mean": "latency_mean_s", "avg": "latency_mean_s", "p50": "latency_p50_s",
            "med": "latency_p50_s", "p95": "latency_p95_s", "p99": "latency_p99_s"}  # fmt: skip
_LEDGER = {"sent": "sent", "confirmed": "confirmed", "delivered": "delivered_unique",
           "lost": "lost", "duplicated": "duplicated", "unexpected": "unexpected",
           "recovered": "recovered", "redeliveries": "redeliveries",
           "dead_lettered": "dead_lettered", "unroutable": "unroutable",
           "order_violations": "order_violations"}  # fmt: skip
METRICS: dict[str, Metric] = {
    **{name: Metric(key, "latency", "analysis") for name, key in _LATENCY.items()},
    "throughput": Metric("throughput_msg_s", "rate", "analysis"),
    "queue_depth": Metric("queue_depth_mean", "depth", "analysis"),
    **{name: Metric(key, "count", "ledger") for name, key in _LEDGER.items()},
}
OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}  # fmt: skip
_SHAPE = re.compile(
    r"^\s*(?:(?P<queue>[^:\s]+)\s*:\s*)?(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(?P<op><=|>=|==|!=|<|>|=)\s*(?P<value>\S(?:.*\S)?)\s*$"
)
_EXAMPLES = "e.g. 'p95 < 50ms', 'lost == 0', 'throughput >= 180/s', 'work: p99 < 100ms'"


@dataclass(frozen=True)
class Threshold:
    text: str
    metric: str
    op: str
    limit: float
    """In base units: seconds, messages per second, messages."""
    queue: str | None = None

    @property
    def spec(self) -> Metric:
        return METRICS[self.metric]


def parse_threshold(text: Any) -> Threshold:
    """``"p95 < 50ms"`` → Threshold; ValueError naming the text and what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a threshold string ({_EXAMPLES})")
    m = _SHAPE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not '[QUEUE:] METRIC OP VALUE' ({_EXAMPLES})")
    queue, metric, op, value = m.group("queue", "metric", "op", "value")
    if metric not in METRICS:
        raise ValueError(
            f"{text!r}: unknown metric {metric!r}{did_you_mean(metric, list(METRICS))}; "
            f"expected one of {', '.join(METRICS)}"
        )
    if op == "=":
        raise ValueError(f"{text!r}: '=' is not a comparison; write '=='")
    spec = METRICS[metric]
    if queue is not None and spec.source == "ledger":
        raise ValueError(f"{text!r}: {metric} is counted for the whole run only; drop '{queue}:'")
    return Threshold(text.strip(), metric, op, _limit(text, spec, value), queue)


def _limit(text: str, spec: Metric, value: str) -> float:
    try:
        if spec.kind == "latency":
            if not re.search(r"[A-Za-z]\s*$", value):
                raise ValueError(f"give the latency a unit, e.g. {value}ms or {value}s")
            limit = parse_duration(value)
        elif spec.kind == "rate":
            limit = parse_rate(value)
        else:
            limit = float(value)
    except ValueError as e:
        raise ValueError(f"{text!r}: {e}") from None
    if not math.isfinite(limit):
        raise ValueError(f"{text!r}: {value!r} is not a finite number")
    return limit


def needs_analysis(thresholds: Iterable[Threshold]) -> list[Threshold]:
    """The thresholds that need ``analysis/summary.json`` (everything but ledger counts)."""
    return [t for t in thresholds if t.spec.source == "analysis"]


def measured_figures(
    summary: Mapping[str, Any] | None, ledger: Mapping[str, Any] | None
) -> dict[tuple[str | None, str], float]:
    """``(queue or None, key) → measured value`` from a summary.json and a ledger.json."""
    figures: dict[tuple[str | None, str], float] = {}
    for e in (summary or {}).get("metrics", []):
        value = e.get("measured")
        if isinstance(value, int | float) and math.isfinite(value):
            figures[(e.get("queue"), str(e["metric"]))] = float(value)
    for key, value in (ledger or {}).items():
        if isinstance(value, int | float):
            figures[(None, key)] = float(value)
    return figures


@dataclass(frozen=True)
class ThresholdResult:
    threshold: Threshold
    measured: float | None
    ok: bool

    def to_json(self) -> dict[str, Any]:
        t = self.threshold
        return {"threshold": t.text, "queue": t.queue, "metric": t.metric, "op": t.op,
                "limit": t.limit, "measured": self.measured, "ok": self.ok}  # fmt: skip


def evaluate(
    thresholds: Iterable[Threshold], figures: Mapping[tuple[str | None, str], float]
) -> list[ThresholdResult]:
    """Judge each threshold on the measured figures; a figure not measured is a miss."""
    out = []
    for t in thresholds:
        value = figures.get((t.queue, t.spec.key))
        ok = value is not None and OPERATORS[t.op](value, t.limit)
        out.append(ThresholdResult(t, value, ok))
    return out


def format_limit(value: float | None, kind: str) -> str:
    """A figure in the unit a threshold is written in: ms, msg/s, messages."""
    if value is None:
        return "not measured"
    if kind == "latency":
        return f"{value * 1e3:.4g} ms"
    if kind == "rate":
        return f"{value:.4g}/s"
    return f"{value:.6g}"
