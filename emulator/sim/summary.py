"""Per-metric means and 95 % confidence intervals across replications (``summary.json``).

Computed from the record tables alone, so measured tables would give the same figures. The
load window ``[start, end)`` is read from the ``events`` rows of kind ``phase`` (``load`` starts
it, ``drain`` ends it): warm-up rows stay in the tables but not in the figures.

Per replication, for all traffic (``queue``/``flow`` null), per queue and per message type
(``flow``):

- ``throughput_msg_s``: acked deliveries with ``t_done`` in the window, per second;
- ``latency_mean_s``/``latency_p50_s``/``latency_p95_s``/``latency_p99_s``: ``latency_s``
  (publish → handler start) of acked deliveries of messages published in the window;
- ``end_to_end_mean_s``: ``t_done - t_publish`` of the same deliveries;
- ``publish_rate_msg_s``: messages published in the window, per second (overall, per flow);
- ``publish_delay_mean_s``: ``t_publish - t_intended`` of messages published in the window;
- ``confirm_mean_s``: ``t_confirm - t_publish`` of the confirmed ones among them;
- ``queue_depth_mean``: the exact time-average over the window of the copies in each queue,
  published and not yet settled, from the records (overall = the sum over queues): the
  definition of ``testbed.analysis.metrics`` (its module docstring says why not the sampled
  ``depth_ready + depth_unacked``);
- ``losses``/``duplicates``: the ledger's ``lost``/``duplicated`` (overall).
The across-replication figure is the mean with a Student-t 95 % interval (``null`` for one
replication); ``values`` lists the per-replication figures.
"""

from __future__ import annotations

__all__ = ["load_window", "replication_metrics", "summarize", "mean_ci"]

import json
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from testbed.core.ledger import codes, message_index
from testbed.core.records import Ledger

Key = tuple[str, str | None, str | None]  # (metric, queue, flow)


def load_window(events: pa.Table | pd.DataFrame) -> tuple[float, float]:
    """(start, end) of the load phase from ``phase`` events."""
    ev = events.to_pandas() if isinstance(events, pa.Table) else events
    start, end = 0.0, math.inf
    for t, kind, detail in zip(ev["t"], ev["kind"], ev["detail"], strict=True):
        if kind != "phase":
            continue
        phase = json.loads(detail).get("phase")
        if phase == "load":
            start = float(t)
        elif phase == "drain":
            end = float(t)
    return start, end


def mean_ci(values: Iterable[float]) -> tuple[float | None, list[float] | None]:
    """Mean and Student-t 95 % interval of finite values (interval None below two values)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return None, None
    m = float(x.mean())
    if len(x) < 2:
        return m, None
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, [m - half, m + half]


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """A float column as numpy, nulls as NaN."""
    return np.asarray(pc.fill_null(column, np.nan).to_numpy(zero_copy_only=False), dtype=float)


def _group_figures(
    out: dict[Key, float],
    key: tuple[str | None, str | None],
    window: tuple[float, float],
    done: np.ndarray,
    pub: np.ndarray,
    lat: np.ndarray,
) -> None:
    """Throughput and latency figures of one group of acked deliveries."""
    start, end = window
    q, f = key
    if end > start:
        out[("throughput_msg_s", q, f)] = float(
            np.count_nonzero((done >= start) & (done < end)) / (end - start)
        )
    inside = (pub >= start) & (pub < end)
    if not inside.any():
        return
    x = lat[inside]
    p50, p95, p99 = np.quantile(x, [0.5, 0.95, 0.99])
    out[("latency_mean_s", q, f)] = float(x.mean())
    out[("latency_p50_s", q, f)] = float(p50)
    out[("latency_p95_s", q, f)] = float(p95)
    out[("latency_p99_s", q, f)] = float(p99)
    out[("end_to_end_mean_s", q, f)] = float((done[inside] - pub[inside]).mean())


def replication_metrics(
    tables: dict[str, pa.Table], ledger: Ledger | None = None
) -> dict[Key, float]:
    """Every figure of one replication's tables, keyed by (metric, queue, flow)."""
    start, end = load_window(tables["events"])
    if not math.isfinite(end):
        end = start
    window = (start, end)
    span = end - start
    msgs = tables["messages"]
    t_pub = _numbers(msgs["t_publish"])
    t_int = _numbers(msgs["t_intended"])
    t_conf = _numbers(msgs["t_confirm"])
    flow, flows = codes(msgs["flow"])
    dels = tables["deliveries"]
    acked = dels.select(["msg_id", "queue", "t_done", "latency_s"]).filter(
        pc.equal(dels["outcome"], "acked")
    )
    idx = message_index(acked["msg_id"], msgs)
    known = idx >= 0
    done = _numbers(acked["t_done"])[known]
    lat = _numbers(acked["latency_s"])[known]
    pub = t_pub[idx[known]]
    dflow = flow[idx[known]]
    queue, queues = codes(acked["queue"])
    queue = queue[known]
    out: dict[Key, float] = {}
    _group_figures(out, (None, None), window, done, pub, lat)
    for k, name in sorted(enumerate(queues), key=lambda kv: kv[1]):
        sel = queue == k
        _group_figures(out, (name, None), window, done[sel], pub[sel], lat[sel])
    for k, name in sorted(enumerate(flows), key=lambda kv: kv[1]):
        sel = dflow == k
        if sel.any():
            _group_figures(out, (None, name), window, done[sel], pub[sel], lat[sel])

    in_window = (t_pub >= start) & (t_pub < end)
    groups: list[tuple[str | None, np.ndarray]] = [(None, in_window)]
    groups += [
        (name, in_window & (flow == k))
        for k, name in sorted(enumerate(flows), key=lambda kv: kv[1])
    ]
    for fname, sel in groups:
        if not sel.any():
            continue
        if span > 0:
            out[("publish_rate_msg_s", None, fname)] = float(np.count_nonzero(sel) / span)
        out[("publish_delay_mean_s", None, fname)] = float((t_pub[sel] - t_int[sel]).mean())
        confirm = t_conf[sel] - t_pub[sel]
        confirm = confirm[~np.isnan(confirm)]
        if len(confirm):
            out[("confirm_mean_s", None, fname)] = float(confirm.mean())

    out.update(_depth(tables, start, end))
    if ledger is not None:
        out[("losses", None, None)] = float(ledger.lost)
        out[("duplicates", None, None)] = float(ledger.duplicated)
    return out


SETTLED = ("acked", "dropped", "dead_lettered")


def _depth(tables: dict[str, pa.Table], start: float, end: float) -> dict[Key, float]:
    """``queue_depth_mean`` per queue and overall (see the module docstring)."""
    if end <= start:
        return {}
    d = tables["deliveries"].select(["msg_id", "queue", "t_deliver", "t_done", "outcome",
                                     "latency_s"]).to_pandas()  # fmt: skip
    settled = d["outcome"].isin(SETTLED)
    d["t_in"] = d["t_deliver"] - d["latency_s"]
    d["t_out"] = d["t_done"].fillna(d["t_deliver"]).where(settled)
    copies = d.groupby(["queue", "msg_id"], sort=False).agg(t_in=("t_in", "min"),
                                                           t_out=("t_out", "max"))  # fmt: skip
    copies = copies.reset_index().dropna(subset=["t_in"])
    m = tables["messages"].select(["msg_id", "queue", "t_publish"]).to_pandas()
    never = m[m["t_publish"].notna() & ~m["msg_id"].isin(d["msg_id"])]
    rows = pd.concat(
        [
            copies[["queue", "t_in", "t_out"]],
            pd.DataFrame({"queue": never["queue"], "t_in": never["t_publish"], "t_out": np.nan}),
        ]
    )
    if rows.empty:
        return {}
    leave = np.minimum(rows["t_out"].fillna(end).to_numpy(dtype=float), end)
    area = np.clip(leave - np.maximum(rows["t_in"].to_numpy(dtype=float), start), 0.0, None)
    per_queue = pd.Series(area).groupby(rows["queue"].to_numpy()).sum() / (end - start)
    out: dict[Key, float] = {("queue_depth_mean", None, None): float(per_queue.sum())}
    for q, value in per_queue.sort_index().items():
        out[("queue_depth_mean", str(q), None)] = float(value)
    return out


def summarize(
    per_replication: list[dict[Key, float]], ledgers: list[Ledger] | None = None
) -> dict[str, Any]:
    """``metrics`` and ``ledger`` sections of summary.json from per-replication figures."""
    keys: list[Key] = []
    for figures in per_replication:
        keys.extend(k for k in figures if k not in keys)
    keys.sort(key=lambda k: (k[1] is not None, k[2] is not None, k[1] or "", k[2] or "", k[0]))
    metrics = []
    for key in keys:
        values = [fig.get(key) for fig in per_replication]
        mean, ci = mean_ci(v for v in values if v is not None)
        metrics.append(
            {
                "metric": key[0],
                "queue": key[1],
                "flow": key[2],
                "predicted": mean,
                "predicted_ci": ci,
                "n": sum(v is not None for v in values),
                "values": [None if v is None or not math.isfinite(v) else v for v in values],
            }
        )
    ledger_section: dict[str, Any] = {}
    if ledgers:
        fields = list(ledgers[0].to_json())
        means: dict[str, float | None] = {}
        cis: dict[str, list[float] | None] = {}
        for name in fields:
            means[name], cis[name] = mean_ci(float(lg.to_json()[name]) for lg in ledgers)
        ledger_section = {"mean": means, "ci": cis}
    return {"metrics": metrics, "ledger": ledger_section}
