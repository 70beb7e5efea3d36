"""Capacity figures of a sweep, from plain numbers: the saturation point and the SLA capacity.

Along a swept load parameter x (producers, rate, ...) with throughput X(x), mean queue depth
D(x) and p95 latency L(x), points in increasing x:

- **Saturation point**: the first point i ≥ 1 where the throughput gain per step falls under
  `min_gain` *and* the queue grows. The gain is the elasticity of throughput to load over the
  step, ``((X_i − X_{i−1}) / X_{i−1}) / ((x_i − x_{i−1}) / x_{i−1})``: 1 while throughput follows
  the load, ~0 once it is flat. The queue grows when ``D_i − D_{i−1} > min_depth_growth``
  (messages). Steps from x = 0 or X = 0 have no elasticity and are skipped.
- **SLA capacity**: the largest x whose p95 latency meets the target (``L(x) ≤ target``), over
  all points (not only a prefix), None when no point meets it.
"""

from __future__ import annotations

__all__ = ["Saturation", "SlaCapacity", "saturation_point", "sla_capacity", "gains"]

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_MIN_GAIN = 0.5
DEFAULT_MIN_DEPTH_GROWTH = 1.0


@dataclass(frozen=True)
class Saturation:
    index: int
    x: float
    throughput: float
    gain: float
    depth_growth: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SlaCapacity:
    index: int
    x: float
    p95_s: float
    target_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _ok(*values: float | None) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


def gains(x: Sequence[float], throughput: Sequence[float | None]) -> list[float | None]:
    """Elasticity of throughput to load per step (None for the first point and undefined
    steps)."""
    out: list[float | None] = [None]
    for i in range(1, len(x)):
        x0, x1, t0, t1 = x[i - 1], x[i], throughput[i - 1], throughput[i]
        if not _ok(t0, t1) or x0 == 0 or x1 == x0 or t0 == 0:
            out.append(None)
            continue
        assert t0 is not None and t1 is not None
        out.append(((t1 - t0) / t0) / ((x1 - x0) / x0))
    return out


def saturation_point(
    x: Sequence[float],
    throughput: Sequence[float | None],
    depth: Sequence[float | None],
    *,
    min_gain: float = DEFAULT_MIN_GAIN,
    min_depth_growth: float = DEFAULT_MIN_DEPTH_GROWTH,
) -> Saturation | None:
    """The first saturated point (see the module docstring), or None."""
    if not (len(x) == len(throughput) == len(depth)):
        raise ValueError(
            f"x, throughput and depth differ in length: {len(x)}, {len(throughput)}, {len(depth)}"
        )
    if any(b <= a for a, b in zip(x, x[1:], strict=False)):
        raise ValueError(f"x must increase strictly, got {list(x)}")
    for i, g in enumerate(gains(x, throughput)):
        d0, d1 = (depth[i - 1], depth[i]) if i else (None, None)
        if g is None or not _ok(d0, d1):
            continue
        assert d0 is not None and d1 is not None
        growth = d1 - d0
        if g < min_gain and growth > min_depth_growth:
            t = throughput[i]
            assert t is not None
            return Saturation(
                index=i,
                x=float(x[i]),
                throughput=float(t),
                gain=float(g),
                depth_growth=float(growth),
            )
    return None


def sla_capacity(
    x: Sequence[float], p95_s: Sequence[float | None], target_s: float
) -> SlaCapacity | None:
    """The largest x with p95 ≤ `target_s`, or None."""
    if len(x) != len(p95_s):
        raise ValueError(f"x and p95 differ in length: {len(x)}, {len(p95_s)}")
    best: SlaCapacity | None = None
    for i, (xi, p) in enumerate(zip(x, p95_s, strict=True)):
        if p is not None and math.isfinite(p) and p <= target_s and (best is None or xi > best.x):
            best = SlaCapacity(index=i, x=float(xi), p95_s=float(p), target_s=float(target_s))
    return best
