"""The sweep's ``sweep.json`` document and its ``sweep.html`` page (self-contained).

Curves of throughput, p95 latency and mean queue depth against the first swept parameter,
measured (points with their 95 % interval) and predicted (line with its interval band), with
the saturation point and SLA capacity of each side marked (definitions in
:mod:`testbed.analysis.capacity`).
"""

from __future__ import annotations

__all__ = ["sweep_document", "write_sweep_page", "numeric", "CURVES"]

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from testbed.analysis.capacity import saturation_point, sla_capacity
from testbed.core.units import parse_duration, parse_rate, parse_size, quantity_dimension
from testbed.report.plots import COLORS, png
from testbed.report.verdict import fmt_value

CURVES = ["throughput_msg_s", "latency_p50_s", "latency_p95_s", "latency_p99_s", "queue_depth_mean"]
_PARSERS = {"rate": parse_rate, "time": parse_duration, "size": parse_size}


def numeric(value: Any) -> float | None:
    """A swept value as a number (units to base units), None when it is not numeric."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    dim = quantity_dimension(value)
    if dim is not None:
        return float(_PARSERS[dim](value))
    return None


def _figures(summary: dict[str, Any], side: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in summary.get("metrics", []):
        if e.get("queue") is None and e["metric"] in CURVES:
            out[e["metric"]] = e.get(side)
            out[e["metric"] + "_ci"] = e.get(f"{side}_ci")
    return out


def _capacity(
    xs: list[float], rows: list[dict[str, Any]], side: str, sla_p95: float, min_gain: float
) -> dict[str, Any]:
    figs = [r[side] for r in rows]
    sat = saturation_point(
        xs,
        [f.get("throughput_msg_s") for f in figs],
        [f.get("queue_depth_mean") for f in figs],
        min_gain=min_gain,
    )
    sla = sla_capacity(xs, [f.get("latency_p95_s") for f in figs], sla_p95)
    return {
        "saturation": sat.to_json() if sat else None,
        "sla_capacity": sla.to_json() if sla else None,
    }


def sweep_document(
    *,
    scenario: str,
    axes: Sequence[Any],
    points: Sequence[Any],
    run_dirs: Sequence[Path],
    summaries: Sequence[dict[str, Any]],
    sla_p95: float,
    min_gain: float,
    root: Path,
) -> dict[str, Any]:
    """``sweep.json``: points, series (one per combination of the other settings) with their
    curves' capacity figures; top-level ``saturation``/``sla_capacity`` are the first
    series'."""
    x_path = axes[0].path
    rows = []
    for p, run_dir, s in zip(points, run_dirs, summaries, strict=True):
        x = numeric(p.settings[x_path])
        rows.append(
            {
                "index": p.index,
                "settings": p.settings,
                "x": x if x is not None else float(p.index),
                "run_dir": os.path.relpath(run_dir, root),
                "verdict": (s.get("verdict") or {}).get("status"),
                "measured": _figures(s, "measured"),
                "predicted": _figures(s, "predicted"),
            }
        )
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        key = tuple(str(v) for k, v in r["settings"].items() if k != x_path)
        groups.setdefault(key, []).append(r)
    series = []
    for members in groups.values():
        members.sort(key=lambda r: r["x"])
        xs = [r["x"] for r in members]
        fixed = {k: v for k, v in members[0]["settings"].items() if k != x_path}
        entry: dict[str, Any] = {"fixed": fixed, "points": [r["index"] for r in members], "x": xs}
        try:
            entry["measured"] = _capacity(xs, members, "measured", sla_p95, min_gain)
            entry["predicted"] = _capacity(xs, members, "predicted", sla_p95, min_gain)
        except ValueError as e:  # repeated x values: no curve to judge
            entry["error"] = str(e)
        series.append(entry)
    first = series[0] if series else {}
    return {
        "scenario": scenario,
        "parameter": x_path,
        "sets": [{"path": a.path, "values": list(a.values)} for a in axes],
        "sla_p95_s": sla_p95,
        "saturation_min_gain": min_gain,
        "points": rows,
        "series": series,
        "saturation": {
            side: (first.get(side) or {}).get("saturation") for side in ("measured", "predicted")
        },
        "sla_capacity": {
            side: (first.get(side) or {}).get("sla_capacity") for side in ("measured", "predicted")
        },
    }


def _plot(doc: dict[str, Any], metric: str, ylabel: str, scale: float = 1.0) -> str:
    fig, ax = plt.subplots(figsize=(9, 3.3))
    rows = {r["index"]: r for r in doc["points"]}
    for n, s in enumerate(doc["series"]):
        label = " ".join(f"{k}={v}" for k, v in s["fixed"].items())
        pts = [rows[i] for i in s["points"]]
        xs = [r["x"] for r in pts]
        for side, style in (("measured", "o-"), ("predicted", "s--")):
            ys = [r[side].get(metric) for r in pts]
            cis = [r[side].get(metric + "_ci") for r in pts]
            if all(y is None for y in ys):
                continue
            y = [float("nan") if v is None else v * scale for v in ys]
            color = COLORS[side] if n == 0 else None
            line = ax.plot(
                xs, y, style, color=color, ms=4, lw=1.3, label=f"{side} {label}".strip()
            )[0]
            lo = [max(0.0, c[0] * scale) if c else v for c, v in zip(cis, y, strict=True)]
            hi = [c[1] * scale if c else v for c, v in zip(cis, y, strict=True)]
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
        for side, ls in (("measured", "-"), ("predicted", "--")):
            sat = (s.get(side) or {}).get("saturation")
            if sat:
                ax.axvline(sat["x"], color="#d62728", ls=ls, lw=1, label=f"saturation ({side})")
            sla = (s.get(side) or {}).get("sla_capacity")
            if sla and metric == "latency_p95_s":
                ax.axvline(sla["x"], color="#2ca02c", ls=ls, lw=1, label=f"SLA capacity ({side})")
    if metric == "latency_p95_s":
        ax.axhline(doc["sla_p95_s"] * scale, color="#2ca02c", lw=0.8, alpha=0.6, label="p95 target")
        ax.set_yscale("log")  # the target and the curve can be orders of magnitude apart
    ax.set(xlabel=doc["parameter"], ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)


def _capacity_text(item: dict[str, Any] | None, key: str) -> str:
    if not item:
        return "not reached"
    extra = (
        f"throughput {item['throughput']:.1f} msg/s, gain {item['gain']:.2f}"
        if key == "saturation"
        else f"p95 {item['p95_s'] * 1e3:.3g} ms"
    )
    return f"x = {item['x']:g} ({extra})"


def write_sweep_page(doc: dict[str, Any], path: Path) -> Path:
    """Write ``sweep.html`` for a sweep document."""
    e = html.escape
    images = [
        ("throughput", _plot(doc, "throughput_msg_s", "throughput (msg/s)")),
        ("latency p95", _plot(doc, "latency_p95_s", "p95 latency (ms)", 1e3)),
        ("queue depth", _plot(doc, "queue_depth_mean", "mean queue depth (msgs)")),
    ]
    cap_rows = "".join(
        f"<tr><td class=l>{e(' '.join(f'{k}={v}' for k, v in s['fixed'].items()) or 'all')}</td>"
        + "".join(
            f"<td>{e(_capacity_text((s.get(side) or {}).get(key), key))}</td>"
            for key in ("saturation", "sla_capacity")
            for side in ("measured", "predicted")
        )
        + "</tr>"
        for s in doc["series"]
    )
    point_rows = "".join(
        f"<tr><td class=l>{e(', '.join(f'{k}={v}' for k, v in r['settings'].items()))}</td>"
        + "".join(
            f"<td>{e(fmt_value(r['measured'].get(m), m))}<br><span class=c>"
            f"{e(fmt_value(r['predicted'].get(m), m))}</span></td>"
            for m in ("throughput_msg_s", "latency_p95_s", "queue_depth_mean")
        )
        + f"<td>{e(str(r['verdict']))}</td>"
        f'<td><a href="{e(r["run_dir"])}/report.html">report</a></td></tr>'
        for r in doc["points"]
    )
    imgs = "".join(
        f'<img class=plot alt="{e(t)}" src="data:image/png;base64,{b}">' for t, b in images
    )
    page = (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<title>mqbed sweep — {e(doc['scenario'])}</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ddd;"
        "padding:.3em .6em;text-align:right;font-size:.9em}th{background:#f5f5f5}"
        ".l{text-align:left}.c{color:#a0522d}img.plot{display:block;max-width:100%}"
        "</style></head><body>"
        f"<h1>Sweep of {e(doc['scenario'])} over {e(doc['parameter'])}</h1>"
        f"<p>p95 target {doc['sla_p95_s'] * 1e3:g} ms; saturation when the throughput gain "
        f"per step (elasticity) is under {doc['saturation_min_gain']:g} and the queue grows.</p>"
        "<h2>Capacity</h2><table id=capacity><thead><tr><th class=l>series</th>"
        "<th>saturation measured</th><th>saturation predicted</th>"
        "<th>SLA capacity measured</th><th>SLA capacity predicted</th></tr></thead>"
        f"<tbody>{cap_rows}</tbody></table>"
        f"<h2>Curves</h2>{imgs}"
        "<h2>Points</h2><p>measured, <span class=c>predicted</span></p>"
        "<table id=points><thead><tr><th class=l>settings</th><th>throughput</th>"
        "<th>p95 latency</th><th>queue depth</th><th>verdict</th><th></th></tr></thead>"
        f"<tbody>{point_rows}</tbody></table></body></html>\n"
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)
    return path
