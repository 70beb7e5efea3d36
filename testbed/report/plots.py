"""Static plots for the report: matplotlib (Agg) figures returned as base64 PNG strings.

Every time plot overlays the measured run (solid) and the prediction (dashed; the mean over
the predicted replications, with a band from their minimum to maximum), shades the warm-up,
shades fault spans (``fault_start`` → ``fault_end`` events of the same target; a fault without
an end runs to the end of the plot) and marks ``scale`` events with vertical lines.
"""

from __future__ import annotations

__all__ = ["png", "time_plots", "cdf_plot", "fault_spans", "scale_marks", "COLORS"]

import base64
import io
import json
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

COLORS = {"measured": "#1f5fa8", "predicted": "#d2691e"}
OVERALL = "*"


def png(fig: Figure) -> str:
    """The figure as a base64 PNG (and closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def fault_spans(events: pd.DataFrame, t_max: float) -> list[tuple[float, float, str]]:
    """(start, end, label) of each fault, pairing starts and ends per target in time order."""
    if events is None or events.empty:
        return []
    ev = events[events.kind.isin(["fault_start", "fault_end"])].sort_values("t")
    if "source" in ev:
        ev = ev[ev.source == ("measured" if (ev.source == "measured").any() else "predicted")]
    if "replication" in ev and not ev.empty:
        ev = ev[ev.replication == ev.replication.min()]
    open_: dict[str, list[tuple[float, str]]] = {}
    spans: list[tuple[float, float, str]] = []
    for row in ev.itertuples():
        target = str(row.target)
        if row.kind == "fault_start":
            open_.setdefault(target, []).append((float(row.t), _label(row.detail, target)))
        elif open_.get(target):
            start, label = open_[target].pop(0)
            spans.append((start, float(row.t), label))
    for pending in open_.values():
        spans.extend((start, t_max, label) for start, label in pending)
    return sorted(spans)


def _label(detail: Any, target: str) -> str:
    try:
        data = json.loads(detail) if isinstance(detail, str) else {}
    except ValueError:
        data = {}
    kind = data.get("kind") or data.get("fault") or ""
    return f"{kind} {target}".strip()


def scale_marks(events: pd.DataFrame) -> list[float]:
    """Times of ``scale`` events (the measured side's first replication when there is one)."""
    if events is None or events.empty:
        return []
    ev = events[events.kind == "scale"]
    if "source" in ev and (ev.source == "measured").any():
        ev = ev[ev.source == "measured"]
    if "replication" in ev and not ev.empty:
        ev = ev[ev.replication == ev.replication.min()]
    return sorted(float(t) for t in ev.t)


def _decorate(
    ax: Axes, spans: list[tuple[float, float, str]], marks: list[float], warmup_end: float | None
) -> None:
    if warmup_end:
        ax.axvspan(0, warmup_end, color="#999999", alpha=0.12, lw=0)
    for i, (start, end, label) in enumerate(spans):
        ax.axvspan(
            start, end, color="#d62728", alpha=0.15, lw=0, label=("fault" if i == 0 else None)
        )
        ax.annotate(
            label,
            (start, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="#a01010",
            va="top",
        )
    for i, t in enumerate(marks):
        ax.axvline(t, color="#2ca02c", ls=":", lw=1.2, label=("scale" if i == 0 else None))
    ax.grid(True, alpha=0.3)


def _side(windows: pd.DataFrame, source: str, column: str, queue: str = OVERALL) -> pd.DataFrame:
    w = windows[(windows.source == source) & (windows.queue == queue)]
    w = w[["t_start", "replication", column]].dropna()
    if w.empty:
        return w
    return w.groupby("t_start")[column].agg(["mean", "min", "max"]).reset_index()


def _overlay(
    ax: Axes,
    windows: pd.DataFrame,
    column: str,
    label: str,
    color_shift: float = 0.0,
    queue: str = OVERALL,
) -> None:
    for source, style in (("measured", "-"), ("predicted", "--")):
        s = _side(windows, source, column, queue)
        if s.empty:
            continue
        color = _shade(COLORS[source], color_shift)
        ax.plot(s.t_start, s["mean"], style, color=color, lw=1.4, label=f"{label} {source}")
        if source == "predicted" and (s["max"] > s["min"]).any():
            ax.fill_between(s.t_start, s["min"], s["max"], color=color, alpha=0.15, lw=0)


def _shade(hex_color: str, amount: float) -> tuple[float, float, float]:
    r, g, b = (int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def time_plots(
    windows: pd.DataFrame, events: pd.DataFrame, warmup_end: float | None
) -> dict[str, str]:
    """``throughput``, ``latency``, ``depth`` plots (base64 PNG) of the whole run."""
    t_max = float(windows.t_start.max() + 1) if not windows.empty else 1.0
    spans, marks = fault_spans(events, t_max), scale_marks(events)
    out: dict[str, str] = {}

    fig, ax = plt.subplots(figsize=(11, 3.4))
    _overlay(ax, windows, "publish_rate", "in (publish)", 0.45)
    _overlay(ax, windows, "ack_rate", "out (ack)")
    _decorate(ax, spans, marks, warmup_end)
    ax.set(xlabel="time since start (s)", ylabel="messages / s", title="Throughput in and out")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    out["throughput"] = png(fig)

    fig, ax = plt.subplots(figsize=(11, 3.4))
    for column, shift in (("latency_p50_s", 0.55), ("latency_p95_s", 0.25), ("latency_p99_s", 0)):
        _overlay(ax, windows, column, column.split("_")[1], shift)
    if (windows.filter(like="latency_p").fillna(0) > 0).any().any():
        ax.set_yscale("log")
    _decorate(ax, spans, marks, warmup_end)
    ax.set(
        xlabel="time since start (s)",
        ylabel="latency (s)",
        title="Latency percentiles per window (by publish time)",
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    out["latency"] = png(fig)

    fig, ax = plt.subplots(figsize=(11, 3.4))
    _overlay(ax, windows, "queue_depth", "depth")
    right = ax.twinx()
    for source, style in (("measured", "-"), ("predicted", "--")):
        s = _side(windows, source, "consumers")
        if not s.empty:
            right.step(
                s.t_start,
                s["mean"],
                style,
                where="post",
                color="#555555",
                lw=1,
                label=f"consumers {source}",
            )
    right.set_ylabel("consumers")
    right.set_ylim(bottom=0)
    _decorate(ax, spans, marks, warmup_end)
    ax.set(
        xlabel="time since start (s)",
        ylabel="messages (ready + unacked)",
        title="Queue depth and consumers",
    )
    handles = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(
        handles[0] + more[0],
        handles[1] + more[1],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.08, 1.0),
    )
    out["depth"] = png(fig)
    return out


def cdf_plot(cdf: pd.DataFrame, ks: float | None) -> str:
    """Measured and predicted latency CDFs of the whole run (log x axis)."""
    fig, ax = plt.subplots(figsize=(11, 3.4))
    c = cdf[cdf.queue == OVERALL].sort_values("bucket")
    for source in ("measured", "predicted"):
        col = f"{source}_cdf"
        if col in c and c[col].notna().any():
            ax.step(c.upper_s, c[col], where="post", color=COLORS[source], lw=1.5, label=source)
    if not c.empty:
        ax.set_xscale("log")
    title = "Latency CDF (acked, published in the load window)"
    if ks is not None and math.isfinite(ks):
        title += f" — KS distance {ks:.3f}"
    ax.set(xlabel="latency (s)", ylabel="fraction ≤ x", title=title, ylim=(0, 1.02))
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)
