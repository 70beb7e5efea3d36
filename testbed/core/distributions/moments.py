"""Moment matching (docs/models.md §2): ``fit(mean, sd)`` chooses a law by coefficient of
variation (Watson & Desrochers s-transitions) — ``HyperZero`` above cv 1, ``ExpErlang`` below,
exponential, Erlang or a constant at the edges — and the ``Fit`` kind resolves to it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, PrivateAttr

from testbed.core.distributions.base import (
    _BATCH,
    FIT_CV_TOLERANCE,
    _Base,
    _Count,
    _DerivedMeanSd,
    _NonNeg,
    _Pos,
    _probability,
)
from testbed.core.distributions.laws import Deterministic, Erlang, Exponential


class HyperZero(_DerivedMeanSd):
    """With probability ``p`` an exponential of rate ``rate``, otherwise zero (cv ≥ 1).

    The shape ``fit`` returns for cv > 1 (Watson & Desrochers s-transition, docs/models.md §2).
    """

    kind: Literal["hyper_zero"] = "hyper_zero"
    p: Annotated[float, AfterValidator(_probability)]
    rate: _Pos

    def _moments(self) -> tuple[float, float]:
        m = self.p / self.rate
        return m, 2 * self.p / self.rate**2 - m * m

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        branch = rng.random(n) < self.p
        return rng.standard_exponential(n) * (branch / self.rate)


class ExpErlang(_DerivedMeanSd):
    """One exponential phase of mean ``mean1`` then ``k`` phases of total mean ``mean2``.

    The shape ``fit`` returns for 0 < cv < 1 (Erlang-type s-transition, docs/models.md §2).
    """

    kind: Literal["exp_erlang"] = "exp_erlang"
    mean1: _NonNeg
    k: _Count
    mean2: _Pos

    def _moments(self) -> tuple[float, float]:
        return self.mean1 + self.mean2, self.mean1**2 + self.mean2**2 / self.k

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean1, n) + rng.gamma(self.k, self.mean2 / self.k, n)


def fit(mean: float, sd: float) -> Exponential | Deterministic | HyperZero | ExpErlang | Erlang:
    """The moment-matched distribution of docs/models.md §2, chosen by cv = sd/mean.

    - sd = 0: ``Deterministic(mean)``.
    - |cv − 1| ≤ ``FIT_CV_TOLERANCE``: ``Exponential(mean)``.
    - cv > 1: ``HyperZero(p=r1, rate=λ)``, r1 = 2μ²/(μ²+σ²), λ = 2μ/(μ²+σ²).
    - cv < 1: ``ExpErlang(μ1, γ, μ2)``, γ the integer with (μ/σ)² − 1 ≤ γ < (μ/σ)², and
      μ1 = (μ − √(γ(γ+1)σ² − γμ²))/(γ+1), μ2 = (γμ + √(γ(γ+1)σ² − γμ²))/(γ+1) (both roots are
      positive for cv < 1; docs/models.md §2 uses this one). When (μ/σ)² is an integer m (to
      1e-9), μ1 equals each of the γ phases and the result is the same law as ``Erlang(m, μ)``,
      which is returned.
    Mean and variance are matched to floating-point accuracy.
    """
    if not (math.isfinite(mean) and mean > 0 and math.isfinite(sd) and sd >= 0):
        raise ValueError(f"fit needs a finite mean > 0 and sd ≥ 0, got mean={mean!r} sd={sd!r}")
    if sd == 0:
        return Deterministic(value=mean)
    cv = sd / mean
    if abs(cv - 1.0) <= FIT_CV_TOLERANCE:
        return Exponential(mean=mean)
    m2 = mean * mean + sd * sd
    if cv > 1.0:
        return HyperZero(p=2 * mean * mean / m2, rate=2 * mean / m2)
    ratio = (mean / sd) ** 2  # > 1
    nearest = round(ratio)
    if abs(ratio - nearest) <= 1e-9 * ratio:
        return Erlang(k=nearest, mean=mean)
    gamma = math.ceil(ratio) - 1
    root = math.sqrt(max(gamma * (gamma + 1) * sd * sd - gamma * mean * mean, 0.0))
    mean1 = (mean - root) / (gamma + 1)
    mean2 = (gamma * mean + root) / (gamma + 1)
    return ExpErlang(mean1=mean1, k=gamma, mean2=mean2)


class Fit(_Base):
    """Kind ``fit``: a target (mean, sd) that resolves at construction to ``fit(mean, sd)``.

    ``mean``/``sd``/``variance`` report the target; ``resolved`` is the concrete distribution
    (whose moments equal the target to ~1e-9 relative) and does all the sampling.
    """

    kind: Literal["fit"] = "fit"
    mean: _Pos
    sd: _NonNeg

    _resolved: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        self._resolved = fit(self.mean, self.sd)

    @property
    def resolved(self) -> Exponential | Deterministic | HyperZero | ExpErlang | Erlang:
        return self._resolved  # type: ignore[no-any-return]

    def _moments(self) -> tuple[float, float]:
        return self.mean, self.sd**2

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._resolved.sample_n(rng, n)  # type: ignore[no-any-return]

    def sample(self, rng: np.random.Generator) -> float:
        return self._resolved.sample(rng)  # type: ignore[no-any-return]

    def sampler(self, rng: np.random.Generator, batch: int = _BATCH) -> Callable[[], float]:
        return self._resolved.sampler(rng, batch)  # type: ignore[no-any-return]
