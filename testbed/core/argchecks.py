"""Argument checks shared by the closed forms (`emulator.analytic`) and the sizing rules the
policies use (`testbed.core.policies.sizing`); messages name the condition and the numbers."""

from __future__ import annotations

__all__ = ["fmt", "finite_non_negative", "positive", "count", "probability"]

import math
from typing import Any


def fmt(x: float) -> str:
    """A number as it appears in messages: 4 significant digits."""
    return f"{x:.4g}"


def finite_non_negative(name: str, v: float) -> float:
    if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number ≥ 0, got {v!r}")
    return float(v)


def positive(name: str, v: float, *, allow_inf: bool = False) -> float:
    ok = isinstance(v, int | float) and v > 0 and (allow_inf or math.isfinite(v))
    if not ok:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
    return float(v)


def count(name: str, v: Any, minimum: int = 1) -> int:
    """An integer ≥ ``minimum`` (3.0 is accepted as 3; 2.5 and True are not)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, int | float)
        or not math.isfinite(v)
        or v != int(v)
        or v < minimum
    ):
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {v!r}")
    return int(v)


def probability(name: str, v: float) -> float:
    if not (isinstance(v, int | float) and 0.0 <= v <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    return float(v)
