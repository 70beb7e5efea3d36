"""A measured figure's 95 % interval from a single replication: a moving-block bootstrap.

With one measured replication there is no spread across replications to build an interval
from, so `testbed.analysis.summary` resamples that replication's load windows instead:
`bootstrap_interval` draws blocks of consecutive windows (`testbed.analysis.stats`'s
`bootstrap_weights`) and recomputes the figure per resample — throughput from the windows'
``ack_rate``, mean queue depth from ``queue_depth``, mean latency from the windows' counts and
means, and the latency percentiles from the summed log-bucket histograms
(`testbed.analysis.latency`) — and takes the central 95 % of those figures.
"""

from __future__ import annotations

__all__ = ["bootstrap_interval"]

import numpy as np
import pandas as pd

from testbed.analysis.latency import BUCKETS_PER_DECADE
from testbed.analysis.stats import bootstrap_weights, hist_quantile, percentile_interval

_QUANTILES = {"latency_p50_s": 0.5, "latency_p95_s": 0.95, "latency_p99_s": 0.99}


def bootstrap_interval(
    windows: pd.DataFrame, histogram: pd.DataFrame, metric: str, queue: str
) -> tuple[list[float] | None, int]:
    """The 95 % interval of `metric` over `queue`'s load windows of the one measured
    replication, and the number of windows it resampled; ``(None, 0)`` without data or for a
    metric not estimated from the windows."""
    w = windows
    w = w[(w.queue == queue) & (w.phase == "load")].sort_values(["replication", "window"])
    if metric in _QUANTILES:
        h = histogram[histogram.queue == queue]
        if h.empty:
            return None, 0
        table = h.pivot_table(
            index="window", columns="bucket", values="n", aggfunc="sum", fill_value=0
        ).sort_index(axis=1)
        values = np.power(10.0, (table.columns.to_numpy(dtype=float) + 0.5) / BUCKETS_PER_DECADE)
        weights = bootstrap_weights(len(table))
        stats = hist_quantile(weights @ table.to_numpy(dtype=float), values, _QUANTILES[metric])
        return percentile_interval(stats), len(table)
    if metric == "latency_mean_s":
        w = w[w.latency_count > 0]
        counts = w.latency_count.to_numpy(dtype=float)
        sums = (w.latency_mean_s.fillna(0.0) * w.latency_count).to_numpy(dtype=float)
        weights = bootstrap_weights(len(w))
        with np.errstate(invalid="ignore", divide="ignore"):
            return percentile_interval((weights @ sums) / (weights @ counts)), len(w)
    column = {"throughput_msg_s": "ack_rate", "queue_depth_mean": "queue_depth"}.get(metric)
    if column is None:
        return None, 0
    v = w[column].dropna().to_numpy(dtype=float)
    if len(v) == 0:
        return None, 0
    return percentile_interval(bootstrap_weights(len(v)) @ v / len(v)), len(v)
