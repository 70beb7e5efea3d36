"""Bootstrap intervals of the difference of one metric between two measured runs (numpy).

The difference is ``other − baseline`` of each run's figure, the figure being the mean over the
run's replications of the per-replication value (:mod:`testbed.analysis.metrics`; the ledger's
``lost``/``duplicated`` for losses and duplicates). Its interval comes from resampling each
run independently and taking the central interval of the resampled differences (percentile
bootstrap), by one of three methods, named in the output:

- ``replications``: when both runs have at least :data:`MIN_REPLICATIONS` replications, the
  per-replication figures (independent by construction) give Welch's t interval of the
  difference of the means, with the Welch–Satterthwaite degrees of freedom. Not a bootstrap:
  over 3 values a bootstrap's resampled means take 10 values at most, and its 99.9 % interval
  is about the range of the values, so that 3 against 3 replications of the same scenario came
  out "significant" whenever one run's three values all lay above the other's — by chance 1 in
  10, not 1 in 1,000 (and so in a real comparison of two seeds, mean latency 2.2 vs 3.3 ms).
  The t law's heavy tails at 2–4 degrees of freedom are exactly the width three values allow.
- ``blocks``: otherwise, a moving-block bootstrap over each run's load window cut in short
  slices (:mod:`testbed.compare.runs`; the replications' slices in sequence), blocks of
  ``⌈n^(1/3)⌉`` consecutive slices (:func:`testbed.analysis.stats.bootstrap_weights`): the
  per-message latencies are resampled slice by slice, so their correlation in time is kept.
  Throughput is the ratio of the resampled acks and slice lengths, latency mean that of the
  latency sums and counts, percentiles those of the resampled histograms; queue depth
  resamples the broker samples. The resampled values are widened by ``√(n/(n − ℓ))``
  (:func:`block_weights`).
- ``poisson``: ledger counts without replications to resample (they are not per window): a
  parametric bootstrap, each count drawn from a Poisson law with the observed mean.

A percentile is not judged (no interval) when either run has fewer than :data:`MIN_TAIL`
latencies beyond it: the bootstrap of an extreme order statistic is inconsistent (it can only
redraw the few largest values), and two seeds of one 3-s scenario then came out "significantly"
different at p99 with ~100 latencies each.

``significant`` says the interval excludes 0. The intervals are simultaneous: the level is
split over the metrics compared (Bonferroni), so comparing two runs of the same scenario flags
nothing with probability ≥ `level` instead of one metric in twenty by chance.
"""

from __future__ import annotations

__all__ = [
    "MIN_REPLICATIONS",
    "RESAMPLES",
    "DiffInterval",
    "block_weights",
    "bonferroni_level",
    "diff_interval",
    "welch_interval",
]

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from testbed.analysis.latency import BUCKETS_PER_DECADE
from testbed.analysis.stats import (
    block_length,
    bootstrap_weights,
    hist_quantile,
    percentile_interval,
)
from testbed.compare.runs import LEDGER_METRICS, MeasuredRun

MIN_REPLICATIONS = 3
"""Below this many replications in either run, slices are resampled instead (a bootstrap over
two values has three possible means: its interval says little)."""
RESAMPLES = 5000
"""Enough for the tails of a Bonferroni-split level (99.4 % over 8 metrics: ~15 per tail)."""
_QUANTILES = {"latency_p50_s": 0.5, "latency_p95_s": 0.95, "latency_p99_s": 0.99}
MIN_TAIL = 10
"""Latencies a run needs beyond a percentile for its interval (p99: 1,000 latencies)."""


@dataclass(frozen=True)
class DiffInterval:
    """The interval of ``other − baseline`` and how it was found."""

    low: float | None
    high: float | None
    method: str
    """``replications``, ``blocks``, ``poisson`` or ``none`` (nothing to resample)."""
    detail: str
    """What was resampled, in words (``"3 vs 3 replications"``, ``"40 vs 41 slices of
    100 ms/100 ms, blocks of 4/4"``)."""

    @property
    def significant(self) -> bool | None:
        """The interval excludes 0 (None without an interval)."""
        if self.low is None or self.high is None:
            return None
        return bool(self.low > 0 or self.high < 0)


def bonferroni_level(level: float, metrics: int) -> float:
    """The per-metric level that makes `metrics` intervals simultaneous at `level`."""
    return 1.0 - (1.0 - level) / max(1, metrics)


def welch_interval(a: list[float], b: list[float], level: float) -> tuple[float, float]:
    """Welch's two-sided `level` t interval of ``mean(b) − mean(a)`` (each ≥ 2 values).

    With no spread in either run the interval is the difference itself."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    va, vb = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    diff = float(y.mean() - x.mean())
    se = math.sqrt(va + vb)
    if se == 0.0:
        return diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(x) - 1) + vb**2 / (len(y) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return diff - half, diff + half


def block_weights(n: int, seed: int) -> tuple[np.ndarray, float]:
    """Moving-block bootstrap weights over `n` units and the factor that widens the
    resampled statistics around their mean.

    The weights are :func:`testbed.analysis.stats.bootstrap_weights` (blocks of ``ℓ =
    ⌈n^(1/3)⌉`` consecutive units). Resampled means spread too little by ``(1 − ℓ/n)`` in
    variance (the blocks' centring bias, exact for independent units: a third too little at
    n = 9), so their deviations are multiplied by ``√(n / (n − ℓ))``.
    """
    length = block_length(n)
    return bootstrap_weights(n, RESAMPLES, seed), math.sqrt(n / (n - length))


def _widened(stats: np.ndarray, factor: float) -> np.ndarray:
    centre = np.nanmean(stats)
    return np.asarray(centre + (stats - centre) * factor)


def _slice_resamples(run: MeasuredRun, metric: str, seed: int) -> tuple[np.ndarray, int] | None:
    """`RESAMPLES` bootstrap values of `metric` from `run`'s slices (or depth samples), and
    how many units were resampled; None with fewer than 3 units."""
    u = run.units
    if metric == "queue_depth_mean":
        depth = run.depth.depth.to_numpy(dtype=float)
        if len(depth) < 3:
            return None
        weights, factor = block_weights(len(depth), seed)
        return _widened(weights @ depth / len(depth), factor), len(depth)
    if len(u) < 3:
        return None
    weights, factor = block_weights(len(u), seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "throughput_msg_s":
            stats = (weights @ u.acks.to_numpy(float)) / (weights @ u.length.to_numpy(float))
        elif metric == "latency_mean_s":
            stats = (weights @ u.lat_sum.to_numpy(float)) / (weights @ u.lat_n.to_numpy(float))
        elif metric in _QUANTILES:
            table = run.histogram.pivot_table(
                index=["replication", "slice"],
                columns="bucket",
                values="n",
                aggfunc="sum",
                fill_value=0,
            )
            table = table.reindex(pd.MultiIndex.from_frame(u[["replication", "slice"]]))
            table = table.fillna(0).reindex(sorted(table.columns), axis=1)
            mids = np.power(10.0, (table.columns.to_numpy(float) + 0.5) / BUCKETS_PER_DECADE)
            counts = weights @ table.to_numpy(dtype=float)
            stats = hist_quantile(counts, mids, _QUANTILES[metric])
        else:
            return None
    return _widened(stats, factor), len(u)


def _poisson_resamples(run: MeasuredRun, metric: str, rng: np.random.Generator) -> np.ndarray:
    total = sum(run.values(metric))
    reps = max(1, len(run.replications))
    return np.asarray(rng.poisson(total, RESAMPLES) / reps, dtype=float)


def _interval(diffs: np.ndarray, level: float) -> tuple[float | None, float | None]:
    ci = percentile_interval(diffs, level)
    return (None, None) if ci is None else (ci[0], ci[1])


def diff_interval(
    baseline: MeasuredRun, other: MeasuredRun, metric: str, level: float, seed: int = 0
) -> DiffInterval:
    """The `level` bootstrap interval of ``other − baseline`` for `metric` (module docstring)."""
    a_vals, b_vals = baseline.values(metric), other.values(metric)
    if not a_vals or not b_vals:
        return DiffInterval(None, None, "none", "no value in one of the runs")
    rng = np.random.default_rng(seed)
    if min(len(a_vals), len(b_vals)) >= MIN_REPLICATIONS:
        t_low, t_high = welch_interval(a_vals, b_vals, level)
        return DiffInterval(
            t_low, t_high, "replications", f"{len(a_vals)} vs {len(b_vals)} replications, Welch t"
        )
    if metric in LEDGER_METRICS:
        diffs = _poisson_resamples(other, metric, rng) - _poisson_resamples(baseline, metric, rng)
        low, high = _interval(diffs, level)
        return DiffInterval(low, high, "poisson", "ledger counts, Poisson law")
    if metric in _QUANTILES:
        need = math.ceil(MIN_TAIL / (1.0 - _QUANTILES[metric]))
        have = min(int(run.units.lat_n.sum()) for run in (baseline, other))
        if have < need:
            return DiffInterval(
                None, None, "none", f"{have} latencies; a p{_QUANTILES[metric] * 100:g} "
                f"interval needs {need} ({MIN_TAIL} beyond it)"
            )  # fmt: skip
    a = _slice_resamples(baseline, metric, seed)
    b = _slice_resamples(other, metric, seed + 1)
    if a is None or b is None:
        return DiffInterval(None, None, "none", "fewer than 3 units to resample in one run")
    low, high = _interval(b[0] - a[0], level)
    if metric == "queue_depth_mean":
        unit = "broker samples"
    else:
        unit = f"slices of {_ms(baseline.slice_s)}/{_ms(other.slice_s)}"
    detail = f"{a[1]} vs {b[1]} {unit}, blocks of {block_length(a[1])}/{block_length(b[1])}"
    return DiffInterval(low, high, "blocks", detail)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:g} s"
