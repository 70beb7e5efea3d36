"""The report's autoscaling section (docs/models.md §7, §8): consumers over time measured vs
predicted, the scaling steps of both sides, cost in consumer-seconds and SLA violations.

Pure functions of the run directory's record tables (``timeseries``, ``events``,
``deliveries``, ``messages``; pandas, small), so a test can hand-build the tables:

- **consumers(t)**: measured, from the workers' ``consumer_start``/``consumer_stop`` events
  (exact; the broker's own ``consumers`` column trails them by its statistics refresh, 2–3 s
  on RabbitMQ's management API); predicted, the ``consumers`` column of ``timeseries`` summed
  over the scaled group's queues (exact), mean over replications.
- **steps**: the ``scale`` events that changed the count (first replication), time and
  current → desired.
- **cost**: Σ consumers × window over the load window [0, duration) (consumer-seconds; the
  drain is left out because the live run and the simulation end it at different moments).
- **SLA**: acked deliveries of messages published in [0, duration) whose latency exceeds the
  scenario's ``sla_latency``.
- **timeline agreement**: MAE of consumers(t) over the load window, and the time offsets of
  the k-th scale-up of each side.
"""

from __future__ import annotations

__all__ = ["autoscaling_section", "consumers_plot"]

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.core.scenario import Scenario


def _read(run_dir: Path, side: str, table: str) -> pd.DataFrame:
    f = run_dir / side / f"{table}.parquet"
    if not f.exists():
        return pd.DataFrame()
    return pd.read_parquet(f)


def _queues(scenario: Scenario, target: str) -> list[str]:
    from testbed.core.policies import make_autoscaler

    spec = next(a for a in scenario.autoscaling if a.target == target)
    return make_autoscaler(scenario, spec).watched_queues()


def consumer_series(ts: pd.DataFrame, queues: list[str], window: float) -> pd.DataFrame:
    """Columns t, mean, min, max: consumers of `queues` per window (over replications)."""
    if ts.empty:
        return pd.DataFrame(columns=["t", "mean", "min", "max"])
    x = ts[ts.queue.isin(queues)].copy()
    x["t"] = (x.t / window).round() * window
    if "replication" not in x:
        x["replication"] = 0
    per = x.groupby(["replication", "t"]).consumers.sum().reset_index()
    out = per.groupby("t").consumers.agg(["mean", "min", "max"]).reset_index()
    return out


def slot_series(events: pd.DataFrame, group: str, ts_t: pd.Series, window: float) -> pd.DataFrame:
    """Measured consumers from the workers' ``consumer_start``/``consumer_stop`` events of
    `group` (exact client-side times): the count at each window time, per replication, then
    mean/min/max over the replications (as `consumer_series`). Empty if there are none."""
    if events.empty:
        return pd.DataFrame()
    ev = events[
        events.kind.isin(["consumer_start", "consumer_stop"])
        & events.target.astype(str).str.startswith(f"{group}.")
    ]
    if ev.empty:
        return pd.DataFrame()
    grid = np.asarray(sorted({round(t / window) * window for t in ts_t}), dtype=float)
    reps = ev.replication if "replication" in ev else pd.Series(0, index=ev.index)
    levels = []
    for _, one in ev.groupby(reps):
        one = one.sort_values("t")
        level = one.kind.map({"consumer_start": 1, "consumer_stop": -1}).cumsum().to_numpy()
        idx = np.searchsorted(one.t.to_numpy(), grid, side="right") - 1
        levels.append(np.where(idx >= 0, level[np.maximum(idx, 0)], 0).astype(float))
    stack = np.vstack(levels)
    return pd.DataFrame(
        {"t": grid, "mean": stack.mean(axis=0), "min": stack.min(axis=0), "max": stack.max(axis=0)}
    )


def scale_steps(events: pd.DataFrame, target: str) -> list[dict[str, Any]]:
    if events.empty:
        return []
    ev = events[(events.kind == "scale") & (events.target == target)]
    if "replication" in ev and not ev.empty:
        ev = ev[ev.replication == ev.replication.min()]
    out = []
    for row in ev.sort_values("t").itertuples():
        d = json.loads(row.detail)
        if d.get("action") in ("up", "down"):
            out.append(
                {
                    "t": float(row.t),
                    "action": d["action"],
                    "from": d["current"],
                    "to": d["desired"],
                    "reason": d.get("reason", ""),
                }
            )
    return out


def _sla(run_dir: Path, side: str, sla: float | None, duration: float) -> dict[str, Any]:
    d = _read(run_dir, side, "deliveries")
    m = _read(run_dir, side, "messages")
    if d.empty or m.empty or sla is None:
        return {"violations": None, "fraction": None}
    keys = ["msg_id", *(["replication"] if "replication" in d and "replication" in m else [])]
    acked = d[d.outcome == "acked"][[*keys, "latency_s"]]
    in_load = m[(m.t_publish >= 0) & (m.t_publish < duration)][keys]
    a = acked.merge(in_load, on=keys, how="inner")  # ids repeat across replications
    reps = a.replication.nunique() if "replication" in a and len(a) else 1
    bad = int((a.latency_s > sla).sum())
    return {
        "violations": bad / max(reps, 1),
        "fraction": bad / len(a) if len(a) else None,
    }


def autoscaling_section(run_dir: Path, scenario: Scenario) -> dict[str, Any] | None:
    """Everything the report shows about autoscaling (None if the scenario does not scale)."""
    if not scenario.autoscaling:
        return None
    spec = scenario.autoscaling[0]
    w = float(scenario.recording.window)
    end = float(scenario.duration + scenario.drain_timeout)
    queues = _queues(scenario, spec.target)
    duration = float(scenario.duration)
    sides: dict[str, Any] = {}
    for side in ("measured", "predicted"):
        ts = _read(run_dir, side, "timeseries")
        if ts.empty:
            continue
        ts = ts[(ts.t >= 0) & (ts.t <= end)]
        events = _read(run_dir, side, "events")
        series = consumer_series(ts, queues, w)
        exact = slot_series(events, spec.target, ts.t, w) if side == "measured" else None
        if exact is not None and not exact.empty:
            series = exact  # the broker's own count trails the starts by its stats interval
        steps = scale_steps(events, spec.target)
        sides[side] = {
            "series": series,
            "steps": steps,
            "cost_consumer_s": float(series[series.t < duration]["mean"].sum() * w),
            "peak": float(series["max"].max()) if len(series) else 0.0,
            "ups": [s["t"] for s in steps if s["action"] == "up"],
            **_sla(run_dir, side, spec.sla_latency, float(scenario.duration)),
        }
    out: dict[str, Any] = {
        "target": spec.target,
        "policy": spec.policy,
        "sla_latency": spec.sla_latency,
        "sides": sides,
    }
    if "measured" in sides and "predicted" in sides:
        a, b = sides["measured"]["series"], sides["predicted"]["series"]
        j = a.merge(b, on="t", how="inner", suffixes=("_m", "_p"))
        j = j[j.t <= float(scenario.duration)]
        out["consumers_mae"] = float((j.mean_m - j.mean_p).abs().mean()) if len(j) else None
        ups_m, ups_p = sides["measured"]["ups"], sides["predicted"]["ups"]
        k = min(len(ups_m), len(ups_p))
        offsets = [ups_m[i] - ups_p[i] for i in range(k)]
        out["scale_up_offsets_s"] = offsets
        out["scale_up_offset_mae_s"] = sum(abs(x) for x in offsets) / k if k else None
        cm, cp = sides["measured"]["cost_consumer_s"], sides["predicted"]["cost_consumer_s"]
        out["cost_rel_error"] = (cp - cm) / cm if cm else None
    return out


def summary_json(section: dict[str, Any]) -> dict[str, Any]:
    """The section without frames (for ``analysis/autoscaling.json``)."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v

    out = {k: clean(v) for k, v in section.items() if k != "sides"}
    out["sides"] = {
        side: {k: clean(v) for k, v in s.items() if k != "series"}
        for side, s in section["sides"].items()
    }
    return out


def consumers_plot(section: dict[str, Any]) -> str:
    """Consumers over time, measured (solid) vs predicted (dashed, band = min–max of the
    replications), with each side's scale-ups (▲) and scale-downs (▼)."""
    from testbed.report.plots import COLORS, plt, png

    fig, ax = plt.subplots(figsize=(11, 3.4))
    for side, style in (("measured", "-"), ("predicted", "--")):
        s = section["sides"].get(side)
        if s is None or s["series"].empty:
            continue
        c = COLORS[side]
        ser = s["series"]
        ax.step(ser.t, ser["mean"], style, where="post", color=c, lw=1.5, label=f"consumers {side}")
        if side == "predicted" and (ser["max"] > ser["min"]).any():
            ax.fill_between(ser.t, ser["min"], ser["max"], step="post", color=c, alpha=0.15, lw=0)
        for st in s["steps"]:
            ax.plot(
                st["t"],
                st["to"],
                "^" if st["action"] == "up" else "v",
                color=c,
                ms=6,
                alpha=0.8,
            )
    title = f"Consumers of {section['target']!r} ({section['policy']})"
    if section.get("consumers_mae") is not None:
        title += f" — MAE {section['consumers_mae']:.2f} consumers"
    ax.set(xlabel="time since start (s)", ylabel="consumers", title=title)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return png(fig)


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "–" if v is None else format(v, spec)


def for_report(run_dir: Path, scenario_yaml: str) -> dict[str, Any] | None:
    """Plot, table rows and notes for the page; writes ``analysis/autoscaling.json``."""
    from testbed.core.scenario_loader import parse_scenario

    scenario, _ = parse_scenario(scenario_yaml, str(run_dir / "scenario.yaml"))
    if scenario is None or not scenario.autoscaling:
        return None
    section = autoscaling_section(run_dir, scenario)
    if section is None or not section["sides"]:
        return None
    (run_dir / "analysis").mkdir(exist_ok=True)
    (run_dir / "analysis" / "autoscaling.json").write_text(
        json.dumps(summary_json(section), indent=2, default=float) + "\n", encoding="utf-8"
    )
    rows = []
    for side, s in section["sides"].items():
        steps = ", ".join(f"{st['t']:.1f}s {st['from']}→{st['to']}" for st in s["steps"][:12])
        if len(s["steps"]) > 12:
            steps += f", … ({len(s['steps'])} in all)"
        rows.append(
            {
                "side": side,
                "cost": _fmt(s["cost_consumer_s"], ".0f"),
                "peak": _fmt(s["peak"], ".0f"),
                "sla": "–"
                if s["violations"] is None
                else f"{s['violations']:.0f} ({s['fraction']:.1%})",
                "steps": steps or "none",
            }
        )
    notes = []
    if section.get("consumers_mae") is not None:
        notes.append(f"consumer-count MAE over the load window {section['consumers_mae']:.2f}")
    if section.get("scale_up_offset_mae_s") is not None:
        notes.append(
            f"k-th scale-up measured − predicted: mean |Δt| "
            f"{section['scale_up_offset_mae_s']:.1f} s over {len(section['scale_up_offsets_s'])}"
        )
    if section.get("cost_rel_error") is not None:
        notes.append(f"cost error {section['cost_rel_error']:+.1%}")
    return {
        "image": consumers_plot(section),
        "rows": rows,
        "note": "; ".join(notes),
        "sla": section["sla_latency"],
    }
