"""The regression and moment maths of calibration (docs/models.md §9), on plain numbers.

- `linear_fit`: least squares t = a + b·x with Pearson r and R² (optionally weighted);
  optionally constrained to
  a, b ≥ 0 (a profile's `LinearCost` cannot hold negative costs), solved exactly: the unconstrained
  optimum if it is feasible, else the best of the boundary solutions (a = 0, b = 0, both 0).
- `difference_fit`: the overhead regressions of §9 — per matched point (size, repeat) the
  difference of two configurations' mean values, regressed on size (prefetch1 − base,
  confirms − base, persistent − transient write time).
- `moments`/`union_moments`: mean and sd (n − 1) of samples, or of the union of several
  sample sets; the profile stores them as `MomentFit` and the simulator draws `fit(mean, sd)`
  (docs/models.md §2).
- `summarize`: the per-point summary written to the sidecar (mean, median, sd, p95, p99).

Everything is in base units (seconds, bytes) and uses numpy only.
"""

from __future__ import annotations

__all__ = [
    "LineFit",
    "Summary",
    "difference_fit",
    "linear_fit",
    "moments",
    "pearson",
    "pooled_moments",
    "summarize",
    "union_moments",
]

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LineFit:
    """y = a + b·x fitted to `n` points.

    `r` is Pearson's r of (x, y) — a property of the data, None when x or y is constant.
    `r2` is the coefficient of determination 1 − SSE/SST of the reported line (equal to r² for
    the unconstrained least-squares line; lower when a constraint moved the line), None when
    y is constant. `a_ols`, `b_ols` are the unconstrained estimates; `constrained` says whether
    the reported line differs from them.
    """

    a: float
    b: float
    r: float | None
    r2: float | None
    n: int
    a_ols: float
    b_ols: float
    constrained: bool = False

    def at(self, x: float) -> float:
        return self.a + self.b * x

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _arrays(x: Iterable[float], y: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(list(x), dtype=float)
    ya = np.asarray(list(y), dtype=float)
    if xa.shape != ya.shape:
        raise ValueError(f"x and y differ in length ({xa.size} vs {ya.size})")
    if xa.size == 0:
        raise ValueError("no points to fit")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ValueError("x and y must be finite")
    return xa, ya


def _weights(w: Iterable[float] | None, n: int) -> np.ndarray:
    if w is None:
        return np.ones(n)
    wa = np.asarray(list(w), dtype=float)
    if wa.shape != (n,) or not np.all(np.isfinite(wa)) or np.any(wa <= 0):
        raise ValueError("weights must be finite, positive and one per point")
    return wa


def pearson(
    x: Iterable[float], y: Iterable[float], weights: Iterable[float] | None = None
) -> float | None:
    """(Weighted) Pearson correlation coefficient; None when either variable is constant."""
    xa, ya = _arrays(x, y)
    w = _weights(weights, xa.size)
    dx = xa - (w @ xa) / w.sum()
    dy = ya - (w @ ya) / w.sum()
    sxx = float(w @ (dx * dx))
    syy = float(w @ (dy * dy))
    if sxx <= 0 or syy <= 0:
        return None
    r = float(w @ (dx * dy)) / math.sqrt(sxx * syy)
    return max(-1.0, min(1.0, r))


def _sse(xa: np.ndarray, ya: np.ndarray, w: np.ndarray, a: float, b: float) -> float:
    e = ya - (a + b * xa)
    return float(w @ (e * e))


def linear_fit(
    x: Iterable[float],
    y: Iterable[float],
    *,
    nonneg: bool = False,
    weights: Iterable[float] | None = None,
) -> LineFit:
    """Least-squares line through (x, y); with `nonneg`, the best line with a ≥ 0 and b ≥ 0.

    `weights` (default all 1) make it weighted least squares — e.g. 1/y² to fit relative
    errors when y spans orders of magnitude; r and R² are then the weighted ones. With a
    single distinct x the slope is not identifiable: b = 0 and a = (weighted) mean(y).
    """
    xa, ya = _arrays(x, y)
    n = int(xa.size)
    w = _weights(weights, n)
    sw = float(w.sum())
    xm, ym = float(w @ xa) / sw, float(w @ ya) / sw
    dx = xa - xm
    sxx = float(w @ (dx * dx))
    if sxx > 0:
        b_ols = float(w @ (dx * (ya - ym))) / sxx
        a_ols = ym - b_ols * xm
    else:
        b_ols, a_ols = 0.0, ym
    a, b = a_ols, b_ols
    if nonneg and (a < 0 or b < 0):
        candidates: list[tuple[float, float]] = [(0.0, 0.0)]
        sx2 = float(w @ (xa * xa))
        if sx2 > 0:
            candidates.append((0.0, max(float(w @ (xa * ya)) / sx2, 0.0)))
        candidates.append((max(ym, 0.0), 0.0))
        a, b = min(candidates, key=lambda ab: _sse(xa, ya, w, *ab))
    dy = ya - ym
    sst = float(w @ (dy * dy))
    r2: float | None = None
    if sst > 0:
        r2 = 1.0 - _sse(xa, ya, w, a, b) / sst
    r = pearson(xa, ya, w) if n > 1 else None
    constrained = (a, b) != (a_ols, b_ols)
    return LineFit(a=a, b=b, r=r, r2=r2, n=n, a_ols=a_ols, b_ols=b_ols, constrained=constrained)


def difference_fit(
    minuend: Mapping[tuple[int, int], float],
    subtrahend: Mapping[tuple[int, int], float],
    *,
    nonneg: bool = True,
) -> LineFit | None:
    """Regress minuend − subtrahend on size over the (size, repeat) keys both have.

    None when they share no key.
    """
    keys = sorted(set(minuend) & set(subtrahend))
    if not keys:
        return None
    return linear_fit(
        [float(k[0]) for k in keys],
        [minuend[k] - subtrahend[k] for k in keys],
        nonneg=nonneg,
    )


def moments(samples: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(mean, sd) with the n − 1 denominator (sd 0 for a single sample)."""
    a = np.asarray(samples, dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    mean = float(a.mean())
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return mean, sd


def union_moments(groups: Iterable[Sequence[float] | np.ndarray]) -> tuple[float, float] | None:
    """(mean, sd) of all samples of all groups together; None when there are none."""
    parts = [np.asarray(g, dtype=float) for g in groups]
    parts = [p for p in parts if p.size]
    if not parts:
        return None
    return moments(np.concatenate(parts))


def pooled_moments(groups: Iterable[tuple[int, float, float]]) -> tuple[float, float] | None:
    """(mean, sd) of the union of groups given as (n, mean, sd) — exactly what `union_moments`
    gives on the samples themselves (sd with n − 1). None when there are no samples."""
    gs = [(int(n), float(m), float(s)) for n, m, s in groups if n > 0]
    total = sum(n for n, _, _ in gs)
    if total == 0:
        return None
    mean = sum(n * m for n, m, _ in gs) / total
    if total == 1:
        return mean, 0.0
    ss = sum((n - 1) * s * s + n * (m - mean) ** 2 for n, m, s in gs)
    return mean, math.sqrt(max(ss, 0.0) / (total - 1))


@dataclass(frozen=True)
class Summary:
    """One point's distribution of a duration (seconds)."""

    n: int
    mean: float
    median: float
    sd: float
    p95: float
    p99: float
    min: float
    max: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples: Sequence[float] | np.ndarray) -> Summary | None:
    """Summary of the samples; None when there are none."""
    a = np.asarray(samples, dtype=float)
    if a.size == 0:
        return None
    mean, sd = moments(a)
    p50, p95, p99 = (float(v) for v in np.percentile(a, [50, 95, 99]))
    return Summary(
        n=int(a.size),
        mean=mean,
        median=p50,
        sd=sd,
        p95=p95,
        p99=p99,
        min=float(a.min()),
        max=float(a.max()),
    )
