"""Distances between latency distributions, as verdict metrics (pandas, on small frames).

The prediction's KS and Wasserstein-1 distances come from the Spark job
(:func:`testbed.analysis.latency.ks_distance`, replications pooled per side). What they must be
compared with is how far two *measured* replications of the same scenario already are from
each other: :func:`replication_noise` gives the largest pairwise KS and W1 between the measured
replications' histograms, the distributional analogue of the measured 95 % interval (a
prediction no farther from the measurements than they are from one another is inside it).
"""

from __future__ import annotations

__all__ = ["replication_noise", "cdf_distances"]

import itertools

import numpy as np
import pandas as pd

from testbed.analysis.latency import BUCKETS_PER_DECADE


def cdf_distances(buckets: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """KS and W1 (s) of two histograms on the same sorted log buckets (counts ``a``, ``b``)."""
    if a.sum() <= 0 or b.sum() <= 0:
        return float("nan"), float("nan")
    fa, fb = np.cumsum(a) / a.sum(), np.cumsum(b) / b.sum()
    upper = np.power(10.0, (buckets + 1) / BUCKETS_PER_DECADE)
    gap = np.abs(fa - fb)
    width = np.diff(upper, append=upper[-1])
    return float(gap.max()), float(np.sum(gap * width))


def replication_noise(histogram: pd.DataFrame, queue: str) -> tuple[float | None, float | None]:
    """Largest pairwise (KS, W1) between measured replications of ``queue`` (None with < 2)."""
    h = histogram[histogram.queue == queue]
    if h.empty or h.replication.nunique() < 2:
        return None, None
    table = h.pivot_table(
        index="bucket", columns="replication", values="n", aggfunc="sum", fill_value=0
    ).sort_index()
    buckets = table.index.to_numpy(dtype=float)
    ks, w1 = 0.0, 0.0
    for r1, r2 in itertools.combinations(table.columns, 2):
        k, w = cdf_distances(
            buckets, table[r1].to_numpy(dtype=float), table[r2].to_numpy(dtype=float)
        )
        if np.isfinite(k):
            ks, w1 = max(ks, k), max(w1, w)
    return ks, w1
