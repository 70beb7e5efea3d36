"""The comparison as a table: rows of text shared by the terminal (rich), markdown and HTML.

One row per (comparison, metric): both values, the difference (absolute and relative), its
interval and a mark: ``▲``/``▼`` a significant rise/fall, ``=`` no significant difference,
``–`` no interval. Values use the report's display units (:func:`testbed.report.verdict.
fmt_value`: ms for latencies), named once in the metric's label.
"""

from __future__ import annotations

__all__ = ["LABELS", "UNITS", "CompareRow", "rows", "print_table", "markdown_table", "method_note"]

from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from testbed.report.verdict import LABELS, fmt_value

UNITS: dict[str, tuple[str, str]] = {
    "throughput_msg_s": ("msg/s", "higher is better"),
    "latency_mean_s": ("s", "lower is better"),
    "latency_p50_s": ("s", "lower is better"),
    "latency_p95_s": ("s", "lower is better"),
    "latency_p99_s": ("s", "lower is better"),
    "queue_depth_mean": ("msgs", "lower is better"),
    "losses": ("msgs", "lower is better"),
    "duplicates": ("msgs", "lower is better"),
}
"""Base unit of each metric's values in the JSON document, and which direction is better."""


@dataclass(frozen=True)
class CompareRow:
    other: str
    metric: str
    label: str
    baseline: str
    value: str
    difference: str
    relative: str
    interval: str
    significant: bool | None
    rise: bool

    @property
    def mark(self) -> str:
        if self.significant is None:
            return "–"
        if not self.significant:
            return "="
        return "▲" if self.rise else "▼"

    @property
    def tone(self) -> str:
        """``ok`` a significant improvement, ``bad`` a significant regression, else ``na``
        (from the metric's better direction in :data:`UNITS`)."""
        if not self.significant:
            return "na"
        higher_better = UNITS[self.metric][1] == "higher is better"
        return "ok" if self.rise == higher_better else "bad"

    @property
    def verdict(self) -> str:
        return {None: "no interval", False: "not significant", True: "significant"}[
            self.significant
        ]


def _signed(value: float | None, metric: str) -> str:
    text = fmt_value(value, metric, unit=False)
    return text if value is None or value < 0 else f"+{text}"


def _label(metric: str) -> str:
    """The metric's name with its display unit: ``latency p95 (ms)``."""
    unit = fmt_value(1.0, metric).partition(" ")[2]
    return f"{LABELS[metric]} ({unit})" if unit else LABELS[metric]


def rows(doc: dict[str, Any]) -> list[CompareRow]:
    """Every metric of every comparison, in order."""
    out = []
    for comp in doc["comparisons"]:
        for m in comp["metrics"]:
            metric, ci = m["metric"], m["interval"]
            rel = m["rel_difference"]
            out.append(
                CompareRow(
                    other=comp["other"],
                    metric=metric,
                    label=_label(metric),
                    baseline=fmt_value(m["baseline"], metric, unit=False),
                    value=fmt_value(m["other"], metric, unit=False),
                    difference=_signed(m["difference"], metric),
                    relative="–" if rel is None else f"{rel:+.1%}",
                    interval="–"
                    if ci is None
                    else f"{_signed(ci[0], metric)} … {_signed(ci[1], metric)}",
                    significant=m["significant"],
                    rise=(m["difference"] or 0.0) > 0,
                )
            )
    return out


def method_note(doc: dict[str, Any]) -> str:
    """How the intervals were found, in one paragraph."""
    methods = sorted(
        {
            f"{m['method']} ({m['resampled']})"
            for c in doc["comparisons"]
            for m in c["metrics"]
            if m["method"] != "none"
        }
    )
    return (
        f"Values are means over each run's replications, load window only. Difference = other "
        f"− baseline; intervals are simultaneous {doc['level']:.0%} bootstrap intervals of the "
        f"difference (each at {doc['per_metric_level']:.2%}, Bonferroni over "
        f"{len(doc['comparisons'][0]['metrics']) if doc['comparisons'] else 0} metrics; "
        f"{doc['resamples']} resamples); significant = the interval excludes 0. Resampled: "
        + "; ".join(methods)
        + "."
    )


def print_table(doc: dict[str, Any], console: Console) -> None:
    """The table on `console`, one block per compared run."""
    for comp in doc["comparisons"]:
        table = Table(
            title=f"{comp['other']}  vs baseline  {comp['baseline']}",
            box=box.SIMPLE_HEAD,
            title_justify="left",
        )
        for name in ("metric", "baseline", "other", "difference", "rel.", "interval", ""):
            table.add_column(name, justify="left" if name == "metric" else "right")
        for r in rows({**doc, "comparisons": [comp]}):
            table.add_row(
                r.label, r.baseline, r.value, r.difference, r.relative, r.interval, r.mark
            )
        console.print(table)
    console.print(method_note(doc), markup=False, highlight=False)


def markdown_table(doc: dict[str, Any]) -> str:
    """``compare.md``: the warnings, then per compared run a markdown table."""
    lines = [f"# Comparison against {doc['baseline']}", ""]
    for w in doc["warnings"]:
        lines += [f"> **Warning:** {w}", ""]
    for comp in doc["comparisons"]:
        lines += [
            f"## {comp['other']}",
            "",
            "| metric | baseline | other | difference | rel. | interval | significant |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        for r in rows({**doc, "comparisons": [comp]}):
            lines.append(
                f"| {r.label} | {r.baseline} | {r.value} | {r.difference} | {r.relative} "
                f"| {r.interval} | {r.mark} {r.verdict} |"
            )
        lines.append("")
    lines += [method_note(doc), ""]
    return "\n".join(lines)
