"""The verdict table as rows of text, shared by the HTML page, the markdown and the console.

One row per entry of ``summary.json`` ``metrics``: the metric, its queue (``all`` for the whole
run), measured value with its 95 % interval, predicted value, the signed relative error, the
criterion and a mark: ✓ within target, ✗ outside, – not judged (no prediction, or nothing to
judge against).
"""

from __future__ import annotations

__all__ = [
    "PEARSON_NOTE",
    "VerdictRow",
    "verdict_rows",
    "status_text",
    "print_verdict",
    "fmt_value",
]

from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

_UNITS: dict[str, tuple[str, float]] = {
    "throughput_msg_s": ("msg/s", 1.0),
    "latency_mean_s": ("ms", 1e3),
    "latency_p50_s": ("ms", 1e3),
    "latency_p95_s": ("ms", 1e3),
    "latency_p99_s": ("ms", 1e3),
    "queue_depth_mean": ("msgs", 1.0),
    "losses": ("msgs", 1.0),
    "duplicates": ("msgs", 1.0),
    "latency_ks": ("", 1.0),
    "latency_w1_s": ("ms", 1e3),
}
LABELS = {
    "throughput_msg_s": "throughput",
    "latency_mean_s": "latency mean",
    "latency_p50_s": "latency p50",
    "latency_p95_s": "latency p95",
    "latency_p99_s": "latency p99",
    "queue_depth_mean": "queue depth",
    "losses": "losses",
    "duplicates": "duplicates",
    "latency_ks": "latency CDF, KS",
    "latency_w1_s": "latency CDF, W1",
}


@dataclass(frozen=True)
class VerdictRow:
    metric: str
    label: str
    queue: str
    measured: str
    measured_ci: str
    predicted: str
    error: str
    criterion: str
    within: bool | None
    rule: str = ""
    """The criterion in a few characters, for narrow consoles: ``±5%``, ``r .69≥.90``, ``CI``."""

    @property
    def mark(self) -> str:
        return {True: "✓", False: "✗", None: "–"}[self.within]


def fmt_value(value: float | None, metric: str, *, unit: bool = True) -> str:
    """A value in the metric's display unit (ms for latencies), three significant digits."""
    if value is None:
        return "–"
    name, scale = _UNITS.get(metric, ("", 1.0))
    x = value * scale
    if abs(x) >= 1000:
        text = f"{x:,.0f}"
    elif abs(x) >= 100:
        text = f"{x:.1f}"
    else:
        text = f"{x:.3g}"
    return f"{text} {name}".strip() if unit else text


def _criterion(e: dict[str, Any]) -> str:
    kind, target = e.get("target_kind"), e.get("target")
    if kind == "abs_rel_error" and target is not None:
        return f"error within ±{target:.0%}"
    if kind == "abs_error_msgs" and target is not None:
        return f"near-empty queue: within ±{target:g} msg"
    if kind == "pearson_r" and target is not None:
        r = e.get("pearson_r")
        shown = f"window r = {r:.2f} " if r is not None else "window r "
        return f"{shown}(target ≥ {target:.2f})"
    if kind == "max_distance" and target is not None:
        return f"distance at most {target:g}"
    if kind == "max_w1_rel_mean" and target is not None:
        return f"at most {target:.0%} of the measured mean latency"
    return "inside measured CI"


def _rule(e: dict[str, Any]) -> str:
    kind, target = e.get("target_kind"), e.get("target")
    if kind == "abs_rel_error" and target is not None:
        return f"±{target:.0%}"
    if kind == "abs_error_msgs" and target is not None:
        return f"±{target:g} msg"
    if kind == "pearson_r" and target is not None:
        r = e.get("pearson_r")
        return f"r {r:.2f}≥{target:.2f}" if r is not None else f"r≥{target:.2f}"
    if kind == "max_distance" and target is not None:
        return f"≤{target:g}"
    if kind == "max_w1_rel_mean" and target is not None:
        return f"≤{target:.0%} mean"
    return "in CI"


def verdict_rows(summary: dict[str, Any], *, overall_only: bool = False) -> list[VerdictRow]:
    """Rows of the verdict table (whole-run rows first, as in summary.json)."""
    rows = []
    for e in summary.get("metrics", []):
        if overall_only and e.get("queue") is not None:
            continue
        metric = e["metric"]
        ci = e.get("measured_ci")
        err = e.get("rel_error")
        rows.append(
            VerdictRow(
                metric=metric,
                label=LABELS.get(metric, metric),
                queue=e.get("queue") or "all",
                measured=fmt_value(e.get("measured"), metric),
                measured_ci=(
                    f"[{fmt_value(ci[0], metric, unit=False)}, "
                    f"{fmt_value(ci[1], metric, unit=False)}]"
                    if ci
                    else ""
                ),
                predicted=fmt_value(e.get("predicted"), metric),
                error="–" if err is None else f"{err:+.1%}",
                criterion=_criterion(e),
                within=e.get("within_target"),
                rule=_rule(e),
            )
        )
    return rows


def status_text(summary: dict[str, Any]) -> str:
    """One line: how many whole-run metrics the prediction got within their accuracy targets.

    It judges the model against this run, not the system against an SLO: that is what
    thresholds do (``thresholds:``, ``mqbed run --threshold``)."""
    v = summary.get("verdict") or {}
    status = v.get("status", "no prediction")
    if status == "no prediction":
        return "no prediction: measured figures only"
    verdict = "model matches the run" if status == "pass" else "model misses the run"
    return (
        f"Prediction accuracy: {v.get('within', 0)} of {v.get('judged', 0)} metrics within "
        f"target ({verdict}; not an SLO verdict)"
    )


PEARSON_NOTE = (
    "window r: Pearson correlation of measured and predicted queue depth across the run's "
    "windows (1 = the prediction rises and falls with the run, 0 = unrelated); judged in "
    "overload scenarios, where the depth follows a trend"
)
"""What the window Pearson r is, printed wherever it is shown."""


def print_verdict(summary: dict[str, Any], console: Console | None = None) -> None:
    """The whole-run verdict table on the console (rich), compact enough for 80 columns:
    units in the metric column, values bare."""
    console = console or Console(emoji=False)
    table = Table(
        title=f"{summary.get('scenario')} — {status_text(summary)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for name, justify in (
        ("metric", "left"),
        ("measured", "right"),
        ("95% CI", "right"),
        ("predicted", "right"),
        ("error", "right"),
        ("target", "left"),
        ("", "center"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for e, r in zip(_overall(summary), verdict_rows(summary, overall_only=True), strict=True):
        unit = _UNITS.get(r.metric, ("", 1.0))[0]
        ci = e.get("measured_ci")
        style = {True: "green", False: "red", None: "dim"}[r.within]
        table.add_row(
            f"{r.label}, {unit}" if unit else r.label,
            fmt_value(e.get("measured"), r.metric, unit=False),
            f"{fmt_value(ci[0], r.metric, unit=False)}–{fmt_value(ci[1], r.metric, unit=False)}"
            if ci
            else "",
            fmt_value(e.get("predicted"), r.metric, unit=False),
            r.error,
            r.rule,
            f"[{style}]{r.mark}[/]",
        )
    if any(e.get("target_kind") == "pearson_r" for e in _overall(summary)):
        table.caption, table.caption_justify = PEARSON_NOTE, "left"
    console.print(table)


def _overall(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in summary.get("metrics", []) if e.get("queue") is None]
