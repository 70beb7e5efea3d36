"""``report.html``: one self-contained page per run (inline CSS, plots as base64 PNG; no
script, no external file, font or stylesheet), rendered from ``report.html.j2``.
"""

from __future__ import annotations

__all__ = ["render_report", "write_report"]

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from testbed.analysis.job import RunAnalysis
from testbed.core.records import Ledger
from testbed.core.redact import redact_text, redact_value
from testbed.report.markdown import profile_line
from testbed.report.plots import cdf_plot, time_plots
from testbed.report.qos_table import qos_note, qos_rows
from testbed.report.verdict import fmt_value, status_text, verdict_rows

PLOTS = [
    ("throughput", "throughput in and out"),
    ("latency", "latency percentiles over time"),
    ("depth", "queue depth and consumers"),
]
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent)),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _per_type(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (type, side): deliveries summed over replications, latency figures the
    median over replications."""
    rows: list[dict[str, Any]] = []
    if frame.empty:
        return rows
    figures = ["latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"]
    grouped = frame.groupby(["flow", "source"], sort=True)
    for (flow, source), g in grouped:
        medians = {f: g[f].median() for f in figures}
        rows.append(
            {
                "flow": flow,
                "source": source,
                "n": f"{int(g.latency_count.sum()):,}",
                "reps": len(g),
                **{
                    key: fmt_value(None if pd.isna(medians[f]) else float(medians[f]), f)
                    for key, f in zip(("mean", "p50", "p95", "p99"), figures, strict=True)
                },
            }
        )
    return rows


def _median_ledger(items: list[dict[str, Any]]) -> dict[str, float]:
    if not items:
        return {}
    frame = pd.DataFrame(items)
    return {k: float(frame[k].median()) for k in frame.columns}


def _ledger(summary: dict[str, Any]) -> tuple[list[dict[str, str]], str]:
    led = summary.get("ledger") or {}
    m_reps, p_reps = led.get("measured_replications", []), led.get("predicted_replications", [])
    m, p = _median_ledger(m_reps), _median_ledger(p_reps)
    rows = []
    for name in Ledger().to_json():
        mv, pv = m.get(name), p.get(name)
        rows.append(
            {
                "name": name,
                "measured": "–" if mv is None else f"{mv:,.0f}",
                "predicted": "–" if pv is None else f"{pv:,.0f}",
                "diff": "–" if mv is None or pv is None else f"{pv - mv:+,.0f}",
            }
        )
    note = (
        f"Per replication (median over {len(m_reps)} measured and {len(p_reps)} predicted "
        "replications). measured/ledger.json sums the measured replications; "
        "predicted/ledger.json is the prediction's replication 0."
    )
    return rows, note


def _scores(summary: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for s in (summary.get("windows") or {}).get("series", []):
        out.append(
            {
                "queue": s.get("queue") or "all",
                "series": s["series"],
                "n": str(s.get("n")),
                "mape": "–" if s.get("mape") is None else f"{s['mape']:.1%}",
                "r": "–" if s.get("pearson_r") is None else f"{s['pearson_r']:.3f}",
            }
        )
    return out


def _ci_note(summary: dict[str, Any]) -> str:
    methods = sorted({e["ci_method"] for e in summary.get("metrics", []) if e.get("ci_method")})
    if not methods:
        return ""
    return "Measured 95 % intervals: " + "; ".join(methods) + "."


def render_report(analysis: RunAnalysis) -> str:
    """The HTML of one run's report."""
    s = analysis.summary
    scenario_warmup = s.get("load_window") or {}
    starts = [v[0] for k, v in scenario_warmup.items() if k.startswith("measured/")]
    warmup_end = min(starts) if starts else None
    images = time_plots(analysis.windows, analysis.events, warmup_end)
    overall_ks = next((d["ks"] for d in s.get("distributions", []) if d["queue"] is None), None)
    images["cdf"] = cdf_plot(analysis.cdf, overall_ks)
    from testbed.report.autoscaling import for_report

    autoscaling = for_report(analysis.run_dir, analysis.scenario_yaml)
    status = (s.get("verdict") or {}).get("status", "no prediction")
    ledger_rows, ledger_note = _ledger(s)
    windows = s.get("windows") or {}
    windows_note = ""
    if windows.get("mape") is not None or windows.get("pearson_r") is not None:
        mape, r = windows.get("mape"), windows.get("pearson_r")
        windows_note = (
            "Across load windows: throughput MAPE "
            + ("–" if mape is None else f"{mape:.1%}")
            + ", queue-depth Pearson r "
            + ("–" if r is None else f"{r:.3f}")
            + "."
        )
    queues = {e["queue"] for e in s.get("metrics", []) if e.get("queue") is not None}
    per_queue = [r for r in verdict_rows(s) if r.queue != "all"] if len(queues) > 1 else []
    template = _ENV.get_template("report.html.j2")
    return template.render(
        run_id=analysis.run_id,
        scenario=analysis.scenario_name,
        summary=s,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        window_s=s.get("windows", {}).get("window_s"),
        status=status_text(s),
        profile_line=profile_line(s),
        status_class={"pass": "pass", "fail": "fail"}.get(status, "none"),
        verdict=verdict_rows(s, overall_only=True),
        per_queue=per_queue,
        ci_note=_ci_note(s),
        windows_note=windows_note,
        plots=PLOTS,
        images=images,
        distributions=s.get("distributions", []),
        per_type=_per_type(analysis.per_type),
        ledger=ledger_rows,
        ledger_note=ledger_note,
        scores=_scores(s),
        qos=qos_rows(s),
        qos_note=qos_note(s),
        scenario_yaml=redact_text(analysis.scenario_yaml),  # also runs older than the redaction
        environment=json.dumps(redact_value(analysis.environment or {}), indent=2),
        autoscaling=autoscaling,
    )


def write_report(analysis: RunAnalysis) -> Path:
    """Write ``<run_dir>/report.html`` (atomically) and return its path."""
    path = analysis.run_dir / "report.html"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render_report(analysis), encoding="utf-8")
    os.replace(tmp, path)
    return path
