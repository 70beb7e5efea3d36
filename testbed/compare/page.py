"""``compare.html``: one self-contained page in the report's style (inline CSS, plots as
base64 PNG, no script), rendered from ``compare.html.j2``.

Plots overlay every run, baseline first: the latency CDFs (acked messages published in the
load window, replications pooled) and, over time since each run's start, the throughput
(acks per second), the latency p50 and p99 per window and the queue depth (means over the
run's replications). Runs are lettered A (the baseline), B, C, ... in the legends.
"""

from __future__ import annotations

__all__ = ["render_page", "run_letter", "cdf_overlay", "time_overlays"]

import string
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from testbed.compare.runs import MeasuredRun  # noqa: E402
from testbed.compare.table import method_note, rows  # noqa: E402
from testbed.report.plots import png  # noqa: E402

PALETTE = ["#1f5fa8", "#d2691e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
PLOTS = [
    ("cdf", "latency CDFs"),
    ("throughput", "throughput over time"),
    ("latency", "latency over time"),
    ("depth", "queue depth over time"),
]
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def run_letter(i: int) -> str:
    """A, B, ..., Z, then A27, A28, ... (the legends' short names)."""
    return string.ascii_uppercase[i] if i < 26 else f"A{i + 1}"


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def cdf_overlay(runs: list[MeasuredRun]) -> str:
    """Every run's latency CDF on one log-x axis (base64 PNG)."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    for i, run in enumerate(runs):
        c = run.cdf.dropna(subset=["cdf"])
        if c.empty:
            continue
        ax.step(
            c.upper_s,
            c.cdf,
            where="post",
            color=_color(i),
            lw=1.5,
            label=f"{run_letter(i)}: {run.run_id}",
        )
        ax.set_xscale("log")
    ax.set(
        xlabel="latency (s)",
        ylabel="fraction ≤ x",
        title="Latency CDF (acked, published in the load window)",
        ylim=(0, 1.02),
    )
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def _series(run: MeasuredRun, column: str) -> tuple[list[float], list[float]]:
    w = run.windows[["t_start", column]].dropna()
    mean = w.groupby("t_start")[column].mean().sort_index()
    return [float(t) for t in mean.index], [float(v) for v in mean]


def time_overlays(runs: list[MeasuredRun]) -> dict[str, str]:
    """``throughput``, ``latency`` and ``depth`` plots over time (base64 PNG)."""
    out: dict[str, str] = {}
    specs = [
        ("throughput", [("ack_rate", "-")], "messages / s", "Throughput (acks per second)"),
        (
            "latency",
            [("latency_p50_s", ":"), ("latency_p99_s", "-")],
            "latency (s)",
            "Latency p50 (dotted) and p99 (solid) per window, by publish time",
        ),
        ("depth", [("queue_depth", "-")], "messages", "Queue depth (ready + unacked)"),
    ]
    for name, columns, ylabel, title in specs:
        fig, ax = plt.subplots(figsize=(11, 3.2))
        positive = False
        for i, run in enumerate(runs):
            for column, style in columns:
                t, v = _series(run, column)
                if not t:
                    continue
                positive = positive or any(x > 0 for x in v)
                label = f"{run_letter(i)} {column.split('_')[1] if name == 'latency' else ''}"
                ax.plot(t, v, style, color=_color(i), lw=1.3, label=label.strip())
        if name == "latency" and positive:
            ax.set_yscale("log")
        ax.set(xlabel="time since start (s)", ylabel=ylabel, title=title)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        out[name] = png(fig)
    return out


def render_page(doc: dict[str, Any], runs: list[MeasuredRun]) -> str:
    """The HTML of the comparison `doc` (:func:`testbed.compare.core.compare_runs`)."""
    images = time_overlays(runs)
    images["cdf"] = cdf_overlay(runs)
    blocks = [
        {"comparison": comp, "rows": rows({**doc, "comparisons": [comp]})}
        for comp in doc["comparisons"]
    ]
    legend = [
        {
            "letter": run_letter(i),
            "color": _color(i),
            "run_id": r.run_id,
            "scenario": r.scenario,
            "replications": len(r.replications),
            "window_s": r.window_s,
        }
        for i, r in enumerate(runs)
    ]
    return _ENV.get_template("compare.html.j2").render(
        baseline=doc["baseline"],
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        warnings=doc["warnings"],
        runs=legend,
        blocks=blocks,
        note=method_note(doc),
        plots=PLOTS,
        images=images,
    )
