"""The common base of every distribution: validated number types (their messages name the
offending value; the field is in the location) and ``_Base`` — analytic moments and the three
ways to draw (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import numpy as np
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from testbed.core.strict import Strict

FIT_CV_TOLERANCE = 1e-9
"""``fit`` returns a plain exponential when |cv − 1| ≤ this; the sd error is then ≤ 1e-9·mean."""

_PROB_TOLERANCE = 1e-9
_BATCH = 4096

# --- validated number types (messages name the offending value; the field is in the location) --


def _positive(v: float) -> float:
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"must be a finite number > 0, got {v!r}")
    return v


def _non_negative(v: float) -> float:
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"must be a finite number ≥ 0, got {v!r}")
    return v


def _count(v: Any) -> Any:
    """Accept 3 or 3.0; reject 2.5, 0, -1, True with a message naming the value."""
    if isinstance(v, bool) or (
        isinstance(v, int | float) and not (math.isfinite(v) and v == int(v) and v >= 1)
    ):
        raise ValueError(f"must be an integer ≥ 1, got {v!r}")
    return int(v) if isinstance(v, float) else v


def _probabilities(p: list[float]) -> list[float]:
    bad = [x for x in p if not (0.0 <= x <= 1.0)]
    if bad:
        raise ValueError(f"must be probabilities in [0, 1], got {bad[0]!r} in {p}")
    total = math.fsum(p)
    if abs(total - 1.0) > _PROB_TOLERANCE:
        raise ValueError(f"must sum to 1 (±{_PROB_TOLERANCE:g}), got {total!r}: {p}")
    return p


def _frequencies(w: list[float]) -> list[float]:
    if math.fsum(w) <= 0:
        raise ValueError(f"must have a positive total, got {w}")
    return w


def _probability(v: float) -> float:
    if not (0.0 < v <= 1.0):
        raise ValueError(f"must be a probability in (0, 1], got {v!r}")
    return v


_Pos = Annotated[float, AfterValidator(_positive)]
_NonNeg = Annotated[float, AfterValidator(_non_negative)]
_Count = Annotated[int, BeforeValidator(_count)]
_Probs = Annotated[list[float], Field(min_length=1), AfterValidator(_probabilities)]
_Values = Annotated[list[_NonNeg], Field(min_length=1)]
_Freqs = Annotated[list[_NonNeg], Field(min_length=1), AfterValidator(_frequencies)]


def _same_length(a: str, la: int, b: str, lb: int) -> None:
    if la != lb:
        raise ValueError(f"{a} and {b} must have equal length, got {la} and {lb}")


def _cumulative(weights: list[float]) -> np.ndarray:
    cum = np.cumsum(np.asarray(weights, dtype=float))
    cum /= cum[-1]
    cum[-1] = 1.0
    return cum


def _pick(rng: np.random.Generator, cum: np.ndarray, n: int) -> np.ndarray:
    """Indices drawn with probabilities given by the cumulative weights ``cum``."""
    idx = np.searchsorted(cum, rng.random(n), side="right")
    return np.minimum(idx, len(cum) - 1)


# --- the common base -------------------------------------------------------------------------


class _Base(Strict):
    """Shared behaviour. ``mean``/``sd`` live in subclasses (some have them as fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def _moments(self) -> tuple[float, float]:
        """(mean, variance), from the parameters."""
        raise NotImplementedError

    @property
    def variance(self) -> float:
        return self._moments()[1]

    @property
    def second_moment(self) -> float:
        """E[X²] = variance + mean²."""
        m, v = self._moments()
        return v + m * m

    @property
    def cv(self) -> float:
        """Coefficient of variation sd/mean (0 for a zero-valued constant)."""
        m, v = self._moments()
        if m == 0:
            return 0.0 if v == 0 else math.inf
        return math.sqrt(v) / m

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` independent draws as a float64 array."""
        raise NotImplementedError

    def sample(self, rng: np.random.Generator) -> float:
        """One draw."""
        return float(self.sample_n(rng, 1)[0])

    def sampler(self, rng: np.random.Generator, batch: int = _BATCH) -> Callable[[], float]:
        """A fast zero-argument sampler: hands out ``sample_n(rng, batch)`` batches one by one."""
        if batch < 1:
            raise ValueError(f"batch must be ≥ 1, got {batch!r}")
        draw = self.sample_n

        def stream() -> Iterator[float]:
            while True:
                yield from draw(rng, batch).tolist()

        return stream().__next__


class _DerivedSd(_Base):
    @property
    def sd(self) -> float:
        return math.sqrt(self._moments()[1])


class _DerivedMeanSd(_DerivedSd):
    @property
    def mean(self) -> float:
        return self._moments()[0]
