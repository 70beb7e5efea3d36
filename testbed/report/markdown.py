"""Markdown verdicts (``summary.md`` per run, for CI logs) and the cross-run table
(``runs-summary.md`` / ``runs-summary.html``) written when several runs are reported at once.
"""

from __future__ import annotations

__all__ = ["summary_markdown", "runs_markdown", "runs_html", "HEADLINE"]

import html
from pathlib import Path
from typing import Any

from testbed.report.qos_table import qos_markdown
from testbed.report.verdict import PEARSON_NOTE, fmt_value, status_text, verdict_rows

HEADLINE = ["throughput_msg_s", "latency_p50_s", "latency_p95_s", "queue_depth_mean", "losses"]


def profile_line(summary: dict[str, Any]) -> str:
    """Which calibration profile the prediction used, where and when it was measured."""
    p = summary.get("profile") or {}
    if not p:
        return ""
    cp = p.get("client_path") or {}
    where = f"`{p['path']}` ({p.get('origin', '?')})" if p.get("path") else p.get("source", "?")
    text = f"Prediction profile: {where}, {p.get('broker', {}).get('kind', '')} " + (
        f"{p.get('broker', {}).get('version', '')}"
    )
    if cp:
        text += (
            f"; client path ({cp.get('client')}) measured on {cp.get('hostname') or cp.get('host')}"
            f" at {cp.get('date')}"
        )
    else:
        text += f"; no measured client path (profile of {p.get('host')}, {p.get('date')})"
    return text + "."


def summary_markdown(summary: dict[str, Any]) -> str:
    """The whole-run verdict table (and per-queue rows when there are several queues)."""
    lines = [
        f"### {summary.get('scenario')} — `{summary.get('run_id')}`",
        "",
        f"**{status_text(summary)}**",
        "",
        "| metric | queue | measured | measured 95 % CI | predicted | error | criterion | ok |",
        "|---|---|---:|---:|---:|---:|---|:-:|",
    ]
    queues = {e["queue"] for e in summary.get("metrics", []) if e.get("queue") is not None}
    rows = verdict_rows(summary, overall_only=len(queues) <= 1)
    for r in rows:
        lines.append(
            f"| {r.label} | {r.queue} | {r.measured} | {r.measured_ci} | {r.predicted} | "
            f"{r.error} | {r.criterion} | {r.mark} |"
        )
    profile = profile_line(summary)
    if profile:
        lines += ["", profile]
    w = summary.get("windows") or {}
    if w.get("mape") is not None or w.get("pearson_r") is not None:
        mape = "–" if w.get("mape") is None else f"{w['mape']:.1%}"
        r_ = "–" if w.get("pearson_r") is None else f"{w['pearson_r']:.3f}"
        lines += [
            "",
            f"Windows: throughput MAPE {mape}, queue-depth Pearson r {r_} ({PEARSON_NOTE}).",
        ]
    return "\n".join(lines) + "\n" + qos_markdown(summary)


def _headline(summary: dict[str, Any], metric: str) -> dict[str, str]:
    e = next(
        (m for m in summary.get("metrics", []) if m["metric"] == metric and m["queue"] is None),
        None,
    )
    if e is None:
        return {"measured": "–", "predicted": "–", "error": "–", "mark": "–"}
    err = e.get("rel_error")
    return {
        "measured": fmt_value(e.get("measured"), metric),
        "predicted": fmt_value(e.get("predicted"), metric),
        "error": "–" if err is None else f"{err:+.1%}",
        "mark": {True: "✓", False: "✗", None: "–"}[e.get("within_target")],
    }


def runs_markdown(summaries: list[dict[str, Any]]) -> str:
    """One row per run: verdict and headline metrics (measured / predicted / error)."""
    head = "| run | scenario | verdict | " + " | ".join(HEADLINE) + " |"
    lines = [head, "|" + "---|" * (3 + len(HEADLINE))]
    for s in summaries:
        cells = []
        for metric in HEADLINE:
            h = _headline(s, metric)
            cells.append(f"{h['measured']} / {h['predicted']} ({h['error']}) {h['mark']}")
        v = (s.get("verdict") or {}).get("status", "no prediction")
        lines.append(
            f"| {s.get('run_id')} | {s.get('scenario')} | {v} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def runs_html(summaries: list[dict[str, Any]], reports: list[Path], base: Path) -> str:
    """The cross-run table as a small self-contained page linking each run's report."""
    e = html.escape
    rows = []
    for s, report in zip(summaries, reports, strict=True):
        link = e(str(report.relative_to(base))) if report.is_relative_to(base) else e(str(report))
        cells = "".join(
            "<td>{measured}<br><span class=c>{predicted} ({error})</span> {mark}</td>".format(
                **{k: e(v) for k, v in _headline(s, m).items()}
            )
            for m in HEADLINE
        )
        status = (s.get("verdict") or {}).get("status", "no prediction")
        rows.append(
            f'<tr><td class=l><a href="{link}">{e(str(s.get("run_id")))}</a></td>'
            f"<td class=l>{e(str(s.get('scenario')))}</td><td>{e(status)}</td>{cells}</tr>"
        )
    heads = "".join(f"<th>{e(m)}<br><span class=c>predicted (error)</span></th>" for m in HEADLINE)
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>mqbed runs</title><style>"
        "body{font-family:system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ddd;padding:.3em .6em;text-align:right;font-size:.9em}"
        "th{background:#f5f5f5}.l{text-align:left}.c{color:#777}</style></head><body>"
        f"<h1>mqbed runs ({len(summaries)})</h1><table><thead><tr><th class=l>run</th>"
        f"<th class=l>scenario</th><th>verdict</th>{heads}</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></body></html>\n"
    )
