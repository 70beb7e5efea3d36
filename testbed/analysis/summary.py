"""``analysis/summary.json``: the verdict of a prediction against its run (docs/models.md §10).

Shape (a public interface: keys are only ever added)::

    {"run_id", "scenario",
     "metrics": [{"metric", "queue", "measured", "measured_ci", "predicted", "rel_error",
                  "within_target", ...}],
     "ledger": {"measured": {...}, "predicted": {...}, ...},
     "windows": {"mape": ..., "pearson_r": ..., ...}, ...}

Per metric and queue (``queue: null`` is the whole run; ``analysis/windows.parquet`` spells it
``"*"``):

- ``measured``/``predicted``: the **median** over each side's replications of the
  per-replication figure (:mod:`testbed.analysis.metrics`; ``losses``/``duplicates`` are the
  ledger's ``lost``/``duplicated``). ``measured_values``/``predicted_values`` list them.
- ``measured_ci``: 95 % interval of the measured figure. With ≥ 2 measured replications a
  Student-t interval on the per-replication values (``ci_method: "t"``); with one replication a
  moving-block bootstrap over the load windows (:mod:`testbed.analysis.window_bootstrap`;
  ``"block-bootstrap over N windows (1 replication)"``), or for ledger counts an exact Poisson
  interval (``"poisson (1 replication)"``). ``predicted_ci``: the t interval over the
  predicted replications.
- ``rel_error``: ``(predicted − measured) / |measured|`` (signed; 0 when both are 0; null when
  only the measured figure is 0).
- ``within_target``: ``|rel_error| ≤ target`` for throughput and latencies (targets from the
  scenario's ``accuracy``); for ``queue_depth_mean`` in a scenario marked ``overload`` the
  across-window Pearson r of queue depth ≥ ``accuracy.queue_depth_pearson_r`` (when either
  series is constant r is undefined and the check falls back to the measured interval), in a
  stable one ``|rel_error| ≤ accuracy.queue_depth_mean`` (the windows' depths are independent
  noise there, r ≈ 0 whatever the model) — unless the measured mean is below one message: a
  relative error of a near-empty queue's depth (0.01 vs 0.03 msgs) says nothing, so there
  ``|predicted − measured| ≤ 1`` message (``target_kind: "abs_error_msgs"``, ``target: 1``);
  for ``losses``/``duplicates`` "inside the measured interval". ``target_kind`` says which;
  ``inside_measured_ci`` is reported for all. Null without a prediction.

``windows``: ``mape`` is the MAPE (a fraction) of the whole run's per-window throughput
(``ack_rate``), ``pearson_r`` the Pearson r of its per-window queue depth; ``series`` has both
scores for every series and queue. ``distributions``: KS and Wasserstein-1 distances between
the latency distributions per queue; they are also judged, as ``latency_ks`` and
``latency_w1_s`` entries of ``metrics`` (see ``_distribution_entries``). ``verdict``:
``pass`` when every judged whole-run metric is within its target, ``fail`` otherwise,
``no prediction`` without one.
"""

from __future__ import annotations

__all__ = ["JUDGED", "TARGETS", "SummaryInputs", "build_summary"]

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from testbed.analysis.distance import replication_noise
from testbed.analysis.stats import median, poisson_interval, rel_error, t_interval
from testbed.analysis.window_bootstrap import bootstrap_interval
from testbed.analysis.windows import OVERALL, PERCENTILE_ACCURACY
from testbed.core.records import Ledger

JUDGED = [
    "throughput_msg_s",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "queue_depth_mean",
    "losses",
    "duplicates",
]
TARGETS = {
    "throughput_msg_s": "throughput",
    "latency_mean_s": "latency_mean",
    "latency_p50_s": "latency_p50",
    "latency_p95_s": "latency_p95",
    "latency_p99_s": "latency_p99",
}
_LEDGER_METRICS = {"losses": "lost", "duplicates": "duplicated"}


@dataclass
class SummaryInputs:
    """Everything the verdict needs, already collected from Spark (small pandas frames)."""

    run_id: str
    scenario: str
    targets: dict[str, float]
    window_s: float
    metrics: pd.DataFrame
    """``source, replication, queue, metric, value`` (queue ``"*"`` = whole run)."""
    windows: pd.DataFrame
    """The measured side's per-window frame (``WINDOW_COLUMNS``)."""
    histogram: pd.DataFrame
    """The measured side's latency histogram: ``replication, queue, window, bucket, n``."""
    ledgers: dict[str, list[Ledger]]
    ledger_files: dict[str, dict[str, Any] | None]
    scores: pd.DataFrame
    """``queue, series, n, mape, pearson_r``."""
    ks: pd.DataFrame
    """``queue, ks, measured_n, predicted_n``."""
    has_prediction: bool
    overload: bool = False
    """The scenario is meant to be unstable: queue depth is judged by its Pearson r."""
    predicted_summary: dict[str, Any] | None = None
    """The simulator's/closed forms' own summary.json, used when there are no tables."""
    extra: dict[str, Any] = field(default_factory=dict)


def _values(frame: pd.DataFrame, source: str, queue: str, metric: str) -> list[float]:
    sel = frame[(frame.source == source) & (frame.queue == queue) & (frame.metric == metric)]
    return [float(v) for v in sel.sort_values("replication")["value"]]


def _score(inp: SummaryInputs, queue: str, series: str, name: str) -> float | None:
    s = inp.scores
    sel = s[(s.queue == queue) & (s.series == series)]
    if sel.empty:
        return None
    value = sel.iloc[0][name]
    return None if value is None or pd.isna(value) else float(value)


def _predicted_from_summary(inp: SummaryInputs, metric: str, queue: str) -> list[float]:
    """The simulator's/closed forms' own figure, when the prediction has no tables."""
    q = None if queue == OVERALL else queue
    for m in (inp.predicted_summary or {}).get("metrics", []):
        if m.get("metric") == metric and m.get("queue") == q and m.get("flow") is None:
            values = m.get("values") or [m.get("predicted")]
            return [float(v) for v in values if v is not None]
    return []


def _entry(inp: SummaryInputs, metric: str, queue: str) -> dict[str, Any] | None:
    if metric in _LEDGER_METRICS:
        field_name = _LEDGER_METRICS[metric]
        m_vals = [float(getattr(x, field_name)) for x in inp.ledgers.get("measured", [])]
        p_vals = [float(getattr(x, field_name)) for x in inp.ledgers.get("predicted", [])]
    else:
        m_vals = _values(inp.metrics, "measured", queue, metric)
        p_vals = _values(inp.metrics, "predicted", queue, metric)
    if not p_vals and inp.predicted_summary is not None:
        p_vals = _predicted_from_summary(inp, metric, queue)
    if not m_vals and not p_vals:
        return None
    measured, predicted = median(m_vals), median(p_vals)
    method: str | None
    if len(m_vals) >= 2:
        ci, method = t_interval(m_vals), "t"
    elif metric in _LEDGER_METRICS and m_vals:
        ci, method = poisson_interval(m_vals[0]), "poisson (1 replication)"
    elif m_vals:
        ci, n = bootstrap_interval(inp.windows, inp.histogram, metric, queue)
        method = f"block-bootstrap over {n} windows (1 replication)" if ci else None
    else:
        ci, method = None, None
    err = rel_error(predicted, measured)
    inside = None if ci is None or predicted is None else bool(ci[0] <= predicted <= ci[1])
    entry: dict[str, Any] = {
        "metric": metric,
        "queue": None if queue == OVERALL else queue,
        "measured": measured,
        "measured_ci": ci,
        "predicted": predicted if inp.has_prediction else None,
        "rel_error": err if inp.has_prediction else None,
        "within_target": None,
        "predicted_ci": t_interval(p_vals) if inp.has_prediction else None,
        "ci_method": method,
        "inside_measured_ci": inside if inp.has_prediction else None,
        "measured_values": m_vals,
        "predicted_values": p_vals if inp.has_prediction else [],
    }
    entry.update(_judge(inp, metric, queue, entry))
    return entry


NEAR_EMPTY_MSGS = 1.0
"""Below this measured mean depth a stable queue is judged by absolute error (messages)."""


def _judge(inp: SummaryInputs, metric: str, queue: str, e: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if metric in TARGETS:
        target = inp.targets.get(TARGETS[metric])
        out.update(target=target, target_kind="abs_rel_error")
        if metric.startswith("latency_"):
            out["ks"] = _ks(inp, queue)
        if inp.has_prediction and e["measured"] is not None and e["predicted"] is not None:
            err = e["rel_error"]
            out["within_target"] = bool(err is not None and abs(err) <= target)
        return out
    if metric == "queue_depth_mean":
        r = _score(inp, queue, "queue_depth", "pearson_r")
        out["pearson_r"] = r
        target = inp.targets.get("queue_depth_pearson_r")
        mean_target = inp.targets.get("queue_depth_mean")
        known = inp.has_prediction and e["measured"] is not None and e["predicted"] is not None
        if not inp.overload and e["measured"] is not None and e["measured"] < NEAR_EMPTY_MSGS:
            out.update(target=NEAR_EMPTY_MSGS, target_kind="abs_error_msgs")
            if known:
                out["within_target"] = bool(abs(e["predicted"] - e["measured"]) <= NEAR_EMPTY_MSGS)
            return out
        if not inp.overload and mean_target is not None:
            out.update(target=mean_target, target_kind="abs_rel_error")
            if known:
                err = e["rel_error"]
                out["within_target"] = bool(err is not None and abs(err) <= mean_target)
            return out
        if r is not None and target is not None:
            out.update(target=target, target_kind="pearson_r")
            if inp.has_prediction:
                out["within_target"] = bool(r >= target)
            return out
    out.update(target=None, target_kind="inside_measured_ci")
    out["within_target"] = e["inside_measured_ci"]
    return out


def _ks(inp: SummaryInputs, queue: str) -> float | None:
    sel = inp.ks[inp.ks.queue == queue]
    if sel.empty or pd.isna(sel.iloc[0]["ks"]):
        return None
    return float(sel.iloc[0]["ks"])


DISTANCES = ["latency_ks", "latency_w1_s"]
"""Distribution metrics: the prediction's distance from the measured latency CDF."""


def _distribution_entries(inp: SummaryInputs, queue: str) -> list[dict[str, Any]]:
    """``latency_ks`` (target: at most ``accuracy.latency_ks``) and ``latency_w1_s`` (target:
    at most ``accuracy.latency_w1`` × the measured mean latency). Their "measured interval" is
    ``[0, the largest distance between two measured replications]``: inside it, the prediction
    is as close to the measurements as they are to one another."""
    sel = inp.ks[inp.ks.queue == queue]
    if sel.empty or not inp.has_prediction:
        return []
    row = sel.iloc[0]
    ks = None if pd.isna(row["ks"]) else float(row["ks"])
    w1 = None if "w1_s" not in row or pd.isna(row["w1_s"]) else float(row["w1_s"])
    noise_ks, noise_w1 = replication_noise(inp.histogram, queue)
    means = _values(inp.metrics, "measured", queue, "latency_mean_s")
    mean = median(means) if means else None
    out = []
    for metric, value, noise, target, limit in (
        ("latency_ks", ks, noise_ks, inp.targets.get("latency_ks"), inp.targets.get("latency_ks")),
        (
            "latency_w1_s",
            w1,
            noise_w1,
            inp.targets.get("latency_w1"),
            None
            if mean is None or inp.targets.get("latency_w1") is None
            else inp.targets["latency_w1"] * mean,
        ),
    ):
        if value is None:
            continue
        out.append(
            {
                "metric": metric,
                "queue": None if queue == OVERALL else queue,
                "measured": None,
                "measured_ci": [0.0, noise] if noise is not None else None,
                "predicted": value,
                "rel_error": None,
                "target": target,
                "target_kind": "max_distance" if metric == "latency_ks" else "max_w1_rel_mean",
                "limit": limit,
                "within_target": None if limit is None else bool(value <= limit),
                "predicted_ci": None,
                "ci_method": "largest distance between measured replications"
                if noise is not None
                else None,
                "inside_measured_ci": None if noise is None else bool(value <= noise),
                "measured_values": [],
                "predicted_values": [value],
            }
        )
    return out


def _queues(inp: SummaryInputs) -> list[str]:
    names = sorted(set(inp.metrics.queue) - {OVERALL})
    return [OVERALL, *names]


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, numpy scalars plain Python."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def build_summary(inp: SummaryInputs) -> dict[str, Any]:
    """The summary.json document (see the module docstring)."""
    entries = []
    for queue in _queues(inp):
        for metric in JUDGED:
            if metric in _LEDGER_METRICS and queue != OVERALL:
                continue
            e = _entry(inp, metric, queue)
            if e is not None:
                entries.append(e)
        entries.extend(_distribution_entries(inp, queue))
    overall = [e for e in entries if e["queue"] is None and e["within_target"] is not None]
    if not inp.has_prediction:
        status = "no prediction"
    else:
        status = "pass" if overall and all(e["within_target"] for e in overall) else "fail"
    ordered = inp.scores.assign(whole=inp.scores.queue != OVERALL).sort_values(
        ["whole", "queue", "series"]
    )
    series = [
        {k: (None if pd.isna(v) else v) for k, v in row.items() if k != "whole"}
        for row in ordered.assign(
            queue=ordered.queue.where(ordered.queue != OVERALL, None)
        ).to_dict("records")
    ]
    doc = {
        "run_id": inp.run_id,
        "scenario": inp.scenario,
        "metrics": entries,
        "ledger": {
            "measured": inp.ledger_files.get("measured"),
            "predicted": inp.ledger_files.get("predicted"),
            "measured_replications": [x.to_json() for x in inp.ledgers.get("measured", [])],
            "predicted_replications": [x.to_json() for x in inp.ledgers.get("predicted", [])],
        },
        "windows": {
            "mape": _score(inp, OVERALL, "ack_rate", "mape"),
            "pearson_r": _score(inp, OVERALL, "queue_depth", "pearson_r"),
            "mape_series": "ack_rate",
            "pearson_r_series": "queue_depth",
            "window_s": inp.window_s,
            "series": series,
        },
        "distributions": [
            {
                "queue": None if row["queue"] == OVERALL else row["queue"],
                "ks": row["ks"],
                "w1_s": row.get("w1_s"),
                "measured_n": row["measured_n"],
                "predicted_n": row["predicted_n"],
            }
            for row in inp.ks.to_dict("records")
        ],
        "verdict": {
            "status": status,
            "within": sum(bool(e["within_target"]) for e in overall),
            "judged": len(overall),
        },
        "prediction": inp.has_prediction,
        "measured_replications": int(
            inp.metrics[inp.metrics.source == "measured"].replication.nunique()
        ),
        "predicted_replications": int(
            inp.metrics[inp.metrics.source == "predicted"].replication.nunique()
        ),
        "percentile_accuracy": PERCENTILE_ACCURACY,
        "targets": inp.targets,
        **inp.extra,
    }
    return _clean(doc)  # type: ignore[no-any-return]
