"""Small statistics on plain numbers (driver side, numpy): intervals and errors.

- `t_interval`: Student-t 95 % interval of the mean of per-replication values.
- `poisson_interval`: exact (Garwood) 95 % interval of a count, for ledger counts of a single
  replication (losses, duplicates are rare events).
- `bootstrap_weights` + `percentile_interval`: a *moving-block* bootstrap over windows, for a
  run with one replication. Windows are autocorrelated (a queue that is long now is long a
  second later), so blocks of ``⌈n^(1/3)⌉`` consecutive windows are resampled rather than single
  windows; ``weights[r, i]`` says how often resample r took window i, so any statistic that is
  linear in per-window data (sums, histograms) is a matrix product.
- `hist_quantile`: quantiles of (resampled) histograms over log buckets.
- `rel_error`: ``(predicted − measured) / |measured|``, signed.
"""

from __future__ import annotations

__all__ = [
    "LEVEL",
    "RESAMPLES",
    "t_interval",
    "poisson_interval",
    "bootstrap_weights",
    "percentile_interval",
    "hist_quantile",
    "rel_error",
    "median",
]

import math

import numpy as np
from scipy import stats

from testbed.core.figures import LEVEL, median, t_interval

RESAMPLES = 2000


# the across-replication rule (median, t interval of the mean) is shared with `mqbed predict`
# (`testbed.core.figures`); re-exported here for the analysis modules
def poisson_interval(count: float, level: float = LEVEL) -> list[float]:
    """Exact (Garwood) interval for the mean of a Poisson count observed as `count`."""
    k = float(count)
    alpha = 1.0 - level
    lo = 0.0 if k <= 0 else float(stats.chi2.ppf(alpha / 2, 2 * k) / 2)
    hi = float(stats.chi2.ppf(1 - alpha / 2, 2 * k + 2) / 2)
    return [lo, hi]


def block_length(n: int) -> int:
    """Moving-block length for `n` windows: ⌈n^(1/3)⌉."""
    return max(1, math.ceil(n ** (1.0 / 3.0)))


def bootstrap_weights(n: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """``(resamples, n)`` counts: how often each of `n` windows is drawn per resample.

    Each resample concatenates blocks of `block_length(n)` consecutive windows starting at
    uniform positions, truncated to `n` windows.
    """
    if n < 1:
        return np.zeros((resamples, 0))
    length = block_length(n)
    blocks = math.ceil(n / length)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - length + 1, size=(resamples, blocks))
    idx = (starts[:, :, None] + np.arange(length)).reshape(resamples, -1)[:, :n]
    weights = np.zeros((resamples, n))
    rows = np.repeat(np.arange(resamples), n)
    np.add.at(weights, (rows, idx.ravel()), 1.0)
    return weights


def percentile_interval(samples: np.ndarray, level: float = LEVEL) -> list[float] | None:
    """The central `level` interval of bootstrap statistics (NaNs ignored)."""
    x = np.asarray(samples, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return None
    lo, hi = np.quantile(x, [0.5 - level / 2, 0.5 + level / 2])
    return [float(lo), float(hi)]


def hist_quantile(counts: np.ndarray, values: np.ndarray, q: float) -> np.ndarray:
    """The `q` quantile of each row of `counts` (histograms over bins with values `values`).

    Returns NaN for an empty row. The value of the first bin whose cumulative count reaches
    ``q`` of the row's total (the lower quantile, as ``numpy``'s ``inverted_cdf``).
    """
    counts = np.atleast_2d(np.asarray(counts, dtype=float))
    cum = np.cumsum(counts, axis=1)
    total = cum[:, -1:] if counts.shape[1] else np.zeros((counts.shape[0], 1))
    reached = cum >= q * total
    first = np.argmax(reached, axis=1)
    out = np.asarray(values, dtype=float)[first] if counts.shape[1] else np.full(len(counts), 0.0)
    return np.where(total[:, 0] > 0, out, np.nan)


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    """``(predicted − measured) / |measured|``; 0 when both are 0, None when only measured is."""
    if predicted is None or measured is None:
        return None
    if not (math.isfinite(predicted) and math.isfinite(measured)):
        return None
    if measured == 0:
        return 0.0 if predicted == 0 else None
    return (predicted - measured) / abs(measured)
