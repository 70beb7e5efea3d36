"""Empirical delay distributions as quantile tables (docs/models.md §9).

A measured delay (publish → delivery at light load, a consumer's hold beyond its service time)
is stored as its quantiles at the fixed probabilities :data:`PROBS`, from the sample's minimum
(p = 0) to its maximum (p = 1). Sampling inverts the piecewise-linear CDF through those points,
so a draw is never below the fastest delay measured (the physical floor), never negative, has
no point mass (unless the sample had one), and reproduces the measured body and tail instead of
two moments. Between measured points (message size, load) the tables are mixed quantile by
quantile — the quantile average of two distributions, which keeps both shapes' common form and
moves location and spread smoothly.

NumPy has no "sample from a quantile table" primitive that keeps a fixed probability grid, and
SciPy's ``rv_histogram`` bins by value (it would need the raw sample, which the profile does
not store); the inversion below is one ``np.interp`` per batch.
"""

from __future__ import annotations

__all__ = [
    "PROBS",
    "QuantileTable",
    "quantile_table",
    "mix",
    "table_sampler",
    "ks_to_sample",
]

import math
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from pydantic import Field, field_validator

from testbed.core.strict import Strict

PROBS: tuple[float, ...] = (
    0.0,
    0.005,
    0.01,
    0.02,
    0.05,
    *(round(0.1 + 0.05 * i, 2) for i in range(17)),  # 0.10, 0.15, …, 0.90
    0.925,
    0.95,
    0.965,
    0.975,
    0.985,
    0.99,
    0.995,
    0.999,
    1.0,
)
"""The probabilities every table is stored at: dense in the tails, where latency lives."""
_P = np.asarray(PROBS)
_BATCH = 4096


class QuantileTable(Strict):
    """Quantiles (seconds) of one measured delay sample at :data:`PROBS`."""

    n: int = Field(ge=1)
    """Sample size behind the table."""
    q: list[float]
    """Non-decreasing quantiles at :data:`PROBS`, ``q[0]`` the minimum, ``q[-1]`` the maximum."""

    @field_validator("q")
    @classmethod
    def _shape(cls, q: list[float]) -> list[float]:
        if len(q) != len(PROBS):
            raise ValueError(f"needs {len(PROBS)} quantiles (at PROBS), got {len(q)}")
        if any(not math.isfinite(x) or x < 0 for x in q):
            raise ValueError("quantiles must be finite and ≥ 0")
        if any(b < a for a, b in zip(q, q[1:], strict=False)):
            raise ValueError("quantiles must not decrease")
        return q

    @property
    def floor(self) -> float:
        return self.q[0]

    @property
    def mean(self) -> float:
        """Mean of the piecewise-linear quantile function (trapezoids over the grid)."""
        q = np.asarray(self.q)
        return float(np.sum((q[1:] + q[:-1]) / 2 * np.diff(_P)))

    def quantile(self, p: float) -> float:
        """The table's quantile function at ``p`` (clamped to [0, 1]): `np.interp` over the
        grid, in plain Python because it is called per simulated copy (`np.interp` costs
        microseconds per scalar)."""
        i = bisect_right(PROBS, p)
        q = self.q
        if i >= len(q):
            return q[-1]
        if i == 0:
            return q[0]
        p0 = PROBS[i - 1]
        return q[i - 1] + (q[i] - q[i - 1]) * (p - p0) / (PROBS[i] - p0)

    def shifted(self, delta: float) -> QuantileTable:
        """The same shape moved by ``delta`` seconds, floored at 0 (a floor never goes negative)."""
        return QuantileTable(n=self.n, q=[max(x + delta, 0.0) for x in self.q])


def quantile_table(sample: Sequence[float] | np.ndarray) -> QuantileTable:
    """The table of a sample (linear interpolation between order statistics)."""
    x = np.asarray(sample, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        raise ValueError("cannot tabulate an empty sample")
    x = np.maximum(x, 0.0)
    q = np.quantile(x, _P)
    return QuantileTable(n=int(len(x)), q=[float(v) for v in np.maximum.accumulate(q)])


def mix(a: QuantileTable, b: QuantileTable, w: float) -> QuantileTable:
    """Quantile-wise interpolation: ``w = 0`` gives ``a``, ``w = 1`` gives ``b``."""
    w = min(max(w, 0.0), 1.0)
    q = (1 - w) * np.asarray(a.q) + w * np.asarray(b.q)
    return QuantileTable(n=min(a.n, b.n), q=[float(v) for v in q])


def table_sampler(
    table: QuantileTable, rng: np.random.Generator, batch: int = _BATCH
) -> Callable[[], float]:
    """A zero-argument sampler of ``table`` (inverse CDF, uniforms drawn in batches)."""
    values = np.asarray(table.q)

    def gen() -> Iterator[float]:
        while True:
            yield from np.interp(rng.random(batch), _P, values).tolist()

    return gen().__next__


def ks_to_sample(table: QuantileTable, sample: Sequence[float] | np.ndarray) -> float:
    """Kolmogorov–Smirnov distance between ``table``'s CDF and a sample's empirical CDF.

    The goodness-of-fit figure of calibration: how far the stored (interpolated) distribution
    is from what was measured at that point.
    """
    x = np.sort(np.asarray(sample, dtype=float))
    n = len(x)
    if n == 0:
        return float("nan")
    q = np.asarray(table.q)
    # the table's CDF at each sample point (flat below the floor and above the maximum)
    f = np.interp(x, q, _P, left=0.0, right=1.0) if q[-1] > q[0] else (x >= q[0]).astype(float)
    upper = np.arange(1, n + 1) / n
    lower = np.arange(0, n) / n
    return float(max(np.max(np.abs(upper - f)), np.max(np.abs(f - lower))))
