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
  from the records (``emulator.sim.depth``; the definition of ``testbed.analysis.metrics``,
  whose module docstring says why not the sampled ``depth_ready + depth_unacked``);
- ``losses``/``duplicates``: the ledger's ``lost``/``duplicated`` (overall).
The across-replication figure (``predicted``) is the median of the per-replication figures, as
the report judges it (`testbed.core.figures`), with ``mean`` and the Student-t 95 % interval of
the mean (``predicted_ci``, ``null`` for one replication); ``values`` lists the per-replication
figures.
"""

from __future__ import annotations

__all__ = ["load_window", "replication_metrics", "summarize", "mean_ci", "FigureStream"]

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from emulator.sim.depth import DepthStream
from emulator.sim.select import quantiles
from emulator.sim.spool import SideFile
from testbed.core.figures import finite, median, t_interval
from testbed.core.ledger import codes, float_column, message_index
from testbed.core.phases import PHASE
from testbed.core.phases import load_window as phase_window
from testbed.core.records import OUTCOMES, Ledger

Key = tuple[str, str | None, str | None]  # (metric, queue, flow)


def load_window(events: pa.Table | pd.DataFrame) -> tuple[float, float]:
    """(start, end) of the load phase from ``phase`` events (`testbed.core.phases.load_window`:
    the earliest ``load`` and ``drain``; 0 and infinity without them)."""
    ev = events.to_pandas() if isinstance(events, pa.Table) else events
    marks = (
        (float(t), json.loads(detail).get("phase"))
        for t, kind, detail in zip(ev["t"], ev["kind"], ev["detail"], strict=True)
        if kind == PHASE
    )
    return phase_window(marks)


def mean_ci(values: Iterable[float]) -> tuple[float | None, list[float] | None]:
    """Mean and Student-t 95 % interval of finite values (interval None below two values)."""
    x = finite(values)
    return (float(x.mean()) if len(x) else None), t_interval(x)


_LAT_ROW = np.dtype([("lat", "<f8"), ("q", "<i4"), ("f", "<i4")])
_ACKED = OUTCOMES.index("acked")
Group = tuple[str, int]  # ("all", 0), ("queue", code) or ("flow", code)


class FigureStream:
    """The figures of one replication, accumulated as its records stream past.

    ``deliveries`` takes batches of delivery columns (a ``emulator.sim.recorder`` listener),
    ``messages`` chunks of message columns with their final confirms; ``figures`` gives what
    ``replication_metrics`` gives for the whole tables. Counts and sums accumulate per group
    (all traffic, queue, flow); the latencies of the window go to ``side`` (a file; in memory
    without one) for the exact quantiles of ``emulator.sim.select``. Means are sums over the
    batches: with one batch they equal numpy's ``mean`` bit for bit, with several they may
    differ in the last bits (a different summation order).
    """

    def __init__(self, window: tuple[float, float], side: Path | None = None) -> None:
        start, end = window
        self.start, self.end = start, (end if math.isfinite(end) else start)
        self.tp: dict[Group, int] = {("all", 0): 0}  # acked done in the window, per group
        self.lat: dict[Group, list[float]] = {}  # [n, sum latency, sum end-to-end]
        self.pub: dict[int | None, list[float]] = {}  # [n, sum delay, n confirms, sum confirm]
        # (counts kept as floats in the lists: exact below 2**53)
        self.side = SideFile(side, _LAT_ROW) if side is not None else None
        self.kept: list[np.ndarray] = []
        self.depth = DepthStream(self.start, self.end)

    def deliveries(self, cols: dict[str, np.ndarray]) -> None:
        """A batch of deliveries (recorder columns, with ``t_publish`` and ``flow``)."""
        ok = cols["outcome"] == _ACKED
        self.depth.deliveries(cols["msg"], cols["queue"], cols["outcome"], cols["t_publish"],
                              cols["t_deliver"], cols["t_done"])  # fmt: skip
        self.add_acked(
            cols["t_done"][ok],
            (cols["t_deliver"] - cols["t_publish"])[ok],
            cols["t_publish"][ok],
            cols["queue"][ok],
            cols["flow"][ok],
        )

    def add_acked(
        self, done: np.ndarray, lat: np.ndarray, pub: np.ndarray, q: np.ndarray, f: np.ndarray
    ) -> None:
        start, end = self.start, self.end
        in_done = (done >= start) & (done < end)
        inside = (pub >= start) & (pub < end)
        groups: list[tuple[Group, np.ndarray | None]] = [(("all", 0), None)]
        groups += [(("queue", int(k)), q == k) for k in np.unique(q)]
        groups += [(("flow", int(k)), f == k) for k in np.unique(f)]
        for g, sel in groups:
            d_in = in_done if sel is None else in_done & sel
            self.tp[g] = self.tp.get(g, 0) + int(np.count_nonzero(d_in))
            ins = inside if sel is None else inside & sel
            if ins.any():
                acc = self.lat.setdefault(g, [0.0, 0.0, 0.0])
                acc[0] += int(np.count_nonzero(ins))
                acc[1] += float(lat[ins].sum())
                acc[2] += float((done[ins] - pub[ins]).sum())
        rows = np.empty(int(np.count_nonzero(inside)), dtype=_LAT_ROW)
        rows["lat"], rows["q"], rows["f"] = lat[inside], q[inside], f[inside]
        if self.side is not None:
            self.side.append(rows)
        else:
            self.kept.append(rows)

    def messages(self, cols: dict[str, np.ndarray]) -> None:
        """A chunk of messages (recorder columns, final ``t_confirm``; with ``msg`` and
        ``dest`` the undelivered ones count in the queue depth)."""
        t_pub, flow = cols["t_publish"], cols["flow"]
        if "msg" in cols and "dest" in cols:
            self.depth.messages(cols["msg"], cols["dest"], t_pub)
        in_window = (t_pub >= self.start) & (t_pub < self.end)
        groups: list[tuple[int | None, np.ndarray]] = [(None, in_window)]
        groups += [(int(k), in_window & (flow == k)) for k in np.unique(flow)]
        for g, sel in groups:
            if not sel.any():
                continue
            acc = self.pub.setdefault(g, [0.0, 0.0, 0.0, 0.0])
            acc[0] += int(np.count_nonzero(sel))
            acc[1] += float((t_pub[sel] - cols["t_intended"][sel]).sum())
            confirm = cols["t_confirm"][sel] - t_pub[sel]
            confirm = confirm[~np.isnan(confirm)]
            acc[2] += len(confirm)
            acc[3] += float(confirm.sum())

    def _blocks(self, g: Group) -> Any:
        def blocks() -> Iterator[np.ndarray]:
            source = self.side.blocks() if self.side is not None else iter(self.kept)
            for rows in source:
                if g[0] == "all":
                    yield rows["lat"]
                else:
                    yield rows["lat"][rows["q" if g[0] == "queue" else "f"] == g[1]]

        return blocks

    def figures(
        self,
        queues: list[str],
        flows: list[str],
        timeseries: pa.Table,
        ledger: Ledger | None = None,
        depth_names: list[str] | None = None,
    ) -> dict[Key, float]:
        """Every figure, keyed by (metric, queue, flow); ``queues``/``flows`` name the codes
        (``depth_names`` those of the depth's queue codes, default ``queues``)."""
        out: dict[Key, float] = {}
        span = self.end - self.start
        for g, count in self.tp.items():
            key = (
                None if g[0] != "queue" else queues[g[1]],
                None if g[0] != "flow" else flows[g[1]],
            )
            if span > 0:
                out[("throughput_msg_s", *key)] = float(count / span)
            acc = self.lat.get(g)
            if acc is None:
                continue
            k = int(acc[0])
            p50, p95, p99 = quantiles(self._blocks(g), k, [0.5, 0.95, 0.99])
            out[("latency_mean_s", *key)] = acc[1] / k
            out[("latency_p50_s", *key)] = p50
            out[("latency_p95_s", *key)] = p95
            out[("latency_p99_s", *key)] = p99
            out[("end_to_end_mean_s", *key)] = acc[2] / k
        for fk, (n, delay, nc, conf) in self.pub.items():
            fname = None if fk is None else flows[fk]
            if span > 0:
                out[("publish_rate_msg_s", None, fname)] = float(int(n) / span)
            out[("publish_delay_mean_s", None, fname)] = delay / n
            if nc:
                out[("confirm_mean_s", None, fname)] = conf / nc
        out.update(self.depth.figures(depth_names if depth_names is not None else queues))
        if ledger is not None:
            out[("losses", None, None)] = float(ledger.lost)
            out[("duplicates", None, None)] = float(ledger.duplicated)
        if self.side is not None:
            self.side.remove()
        return out


def replication_metrics(
    tables: dict[str, pa.Table], ledger: Ledger | None = None
) -> dict[Key, float]:
    """Every figure of one replication's tables, keyed by (metric, queue, flow)."""
    fs = FigureStream(load_window(tables["events"]))
    msgs = tables["messages"]
    t_pub = float_column(msgs["t_publish"])
    flow, flows = codes(msgs["flow"])
    dels = tables["deliveries"]
    acked = dels.select(["msg_id", "queue", "t_done", "latency_s"]).filter(
        pc.equal(dels["outcome"], "acked")
    )
    idx = message_index(acked["msg_id"], msgs)
    known = idx >= 0
    queue, queues = codes(acked["queue"])
    fs.add_acked(
        float_column(acked["t_done"])[known],
        float_column(acked["latency_s"])[known],
        t_pub[idx[known]],
        queue[known],
        flow[idx[known]],
    )
    queues_seen = pc.unique(pa.concat_arrays([pc.unique(dels["queue"]), pc.unique(msgs["queue"])]))
    names = sorted(q for q in queues_seen.to_pylist() if q is not None)
    m_all = message_index(dels["msg_id"], msgs)
    seen = m_all >= 0
    fs.depth.deliveries(
        m_all[seen],
        _codes_in(dels["queue"], names)[seen],
        _codes_in(dels["outcome"], list(OUTCOMES))[seen],
        t_pub[m_all[seen]],
        float_column(dels["t_deliver"])[seen],
        float_column(dels["t_done"])[seen],
    )
    fs.messages(
        {
            "flow": flow,
            "t_intended": float_column(msgs["t_intended"]),
            "t_publish": t_pub,
            "t_confirm": float_column(msgs["t_confirm"]),
            "msg": np.arange(len(t_pub)),
            "dest": _codes_in(msgs["queue"], names),
        }
    )
    return fs.figures(queues, flows, tables["timeseries"], ledger, depth_names=names)


def _codes_in(column: Any, names: list[str]) -> np.ndarray:
    """Each value's index in ``names`` (-1 for a null or an unknown one)."""
    found = pc.index_in(column, value_set=pa.array(names, type=pa.string()))
    return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


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
                "predicted": median(values),  # what the report judges (testbed.core.figures)
                "predicted_ci": ci,
                "mean": mean,
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
