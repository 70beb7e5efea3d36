"""How a judged figure is computed — one rule for `mqbed predict`'s own summary
(`emulator.sim.summary`, numpy) and for the report that judges it (`testbed.analysis`, Spark),
so a prediction printed by one and judged by the other is the same number
(tests/analysis/test_metric_definitions.py holds the two together on the same records).

- `percentile_index`: a latency percentile is an order statistic, never an interpolation: the
  q-quantile of n values is the smallest value with at least a fraction q of them at or below
  it (the inverted CDF; numpy's ``method="inverted_cdf"``, what Spark's ``percentile_approx``
  returns at full accuracy). A predicted p99 is then a latency some message really had;
- `median`: the figure across replications is the **median** of the per-replication values
  (finite ones): one replication disturbed by the machine moves it less than it moves a mean;
- `t_interval`: its 95 % interval is the Student-t interval of their mean (None below two).
"""

from __future__ import annotations

__all__ = ["LEVEL", "finite", "median", "percentile_index", "t_interval"]

import math
from collections.abc import Iterable

import numpy as np
from scipy import stats

LEVEL = 0.95


def percentile_index(q: float, n: int) -> int:
    """The 0-based index, among `n` sorted values (n ≥ 1), of their q-quantile by the inverted
    CDF: rank ⌈q·n⌉, at least the first (numpy's ``inverted_cdf`` to the last bit)."""
    return min(max(math.ceil(q * n) - 1, 0), n - 1)


def finite(values: Iterable[float | None]) -> np.ndarray:
    """The values that are numbers (not None, not NaN or infinite), as a float array."""
    x = np.asarray([v for v in values if v is not None], dtype=float)
    return x[np.isfinite(x)]


def median(values: Iterable[float | None]) -> float | None:
    """Median of the finite values, None when there are none."""
    x = finite(values)
    return float(np.median(x)) if len(x) else None


def t_interval(values: Iterable[float | None], level: float = LEVEL) -> list[float] | None:
    """Student-t interval of the mean of the finite values; None below two of them."""
    x = finite(values)
    if len(x) < 2:
        return None
    m = float(x.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return [m - half, m + half]
