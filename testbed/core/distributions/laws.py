"""The named laws a scenario writes: exponential, deterministic, uniform, Erlang,
hyperexponential, gamma, lognormal, and the discrete choice and empirical laws."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import model_validator

from testbed.core.distributions.base import (
    _BATCH,
    _Base,
    _Count,
    _cumulative,
    _DerivedMeanSd,
    _DerivedSd,
    _Freqs,
    _NonNeg,
    _pick,
    _Pos,
    _Probs,
    _same_length,
    _Values,
)


class Exponential(_DerivedSd):
    """Exponential with the given mean (rate 1/mean)."""

    kind: Literal["exponential"] = "exponential"
    mean: _Pos

    def _moments(self) -> tuple[float, float]:
        return self.mean, self.mean**2

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean, n)


class Deterministic(_DerivedMeanSd):
    """A constant. Kind ``fixed`` is the same thing, spelled as message sizes usually are."""

    kind: Literal["deterministic", "fixed"] = "deterministic"
    value: _NonNeg

    def _moments(self) -> tuple[float, float]:
        return self.value, 0.0

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=float)

    def sample(self, rng: np.random.Generator) -> float:
        return self.value

    def sampler(self, rng: np.random.Generator, batch: int = _BATCH) -> Callable[[], float]:
        value = self.value
        return lambda: value


class Uniform(_DerivedMeanSd):
    """Uniform on [low, high]."""

    kind: Literal["uniform"] = "uniform"
    low: _NonNeg
    high: _NonNeg

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"uniform needs low ≤ high, got low={self.low!r} high={self.high!r}")
        return self

    def _moments(self) -> tuple[float, float]:
        return (self.low + self.high) / 2, (self.high - self.low) ** 2 / 12

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)


class Erlang(_DerivedSd):
    """Sum of ``k`` exponential phases with total mean ``mean`` (cv = 1/√k)."""

    kind: Literal["erlang"] = "erlang"
    k: _Count
    mean: _Pos

    def _moments(self) -> tuple[float, float]:
        return self.mean, self.mean**2 / self.k

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.k, self.mean / self.k, n)


class Hyperexponential(_DerivedMeanSd):
    """With probability ``p[i]`` an exponential of rate ``rates[i]``."""

    kind: Literal["hyperexponential"] = "hyperexponential"
    p: _Probs
    rates: list[_Pos]

    @model_validator(mode="after")
    def _lengths(self) -> Hyperexponential:
        _same_length("p", len(self.p), "rates", len(self.rates))
        return self

    def _moments(self) -> tuple[float, float]:
        pairs = list(zip(self.p, self.rates, strict=True))
        m = math.fsum(p / r for p, r in pairs)
        return m, math.fsum(2 * p / r**2 for p, r in pairs) - m * m

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        idx = _pick(rng, _cumulative(self.p), n)
        return rng.standard_exponential(n) / np.asarray(self.rates)[idx]


class Gamma(_DerivedSd):
    """Gamma with shape ``shape`` and mean ``mean`` (scale = mean/shape, cv = 1/√shape)."""

    kind: Literal["gamma"] = "gamma"
    shape: _Pos
    mean: _Pos

    def _moments(self) -> tuple[float, float]:
        return self.mean, self.mean**2 / self.shape

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.shape, self.mean / self.shape, n)


class Lognormal(_Base):
    """Lognormal given by its own mean and sd (not those of the underlying normal)."""

    kind: Literal["lognormal"] = "lognormal"
    mean: _Pos
    sd: _NonNeg

    @property
    def normal_params(self) -> tuple[float, float]:
        """(μ, σ) of the underlying normal: σ² = ln(1 + sd²/mean²), μ = ln(mean) − σ²/2."""
        s2 = math.log1p((self.sd / self.mean) ** 2)
        return math.log(self.mean) - s2 / 2, math.sqrt(s2)

    def _moments(self) -> tuple[float, float]:
        return self.mean, self.sd**2

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mu, sigma = self.normal_params
        return rng.lognormal(mu, sigma, n)


class _Discrete(_DerivedMeanSd):
    kind: str
    values: _Values
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _lengths(self) -> _Discrete:
        if self.weights is not None:
            _same_length("values", len(self.values), "weights", len(self.weights))
        return self

    def _moments(self) -> tuple[float, float]:
        x = np.asarray(self.values, dtype=float)
        if self.weights is None:
            p = np.full(len(x), 1.0 / len(x))
        else:
            p = np.asarray(self.weights, dtype=float) / math.fsum(self.weights)
        m = float(p @ x)
        return m, float(p @ (x - m) ** 2)

    def sample_n(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = np.asarray(self.values, dtype=float)
        if self.weights is None:
            return x[rng.integers(0, len(x), n)]
        return x[_pick(rng, _cumulative(self.weights), n)]


class Choice(_Discrete):
    """One of ``values`` with probabilities ``weights`` (must sum to 1; omitted = equal).

    E.g. SPECjms2007 Order sizes: values [1740, 7100, 41010], weights [0.95, 0.04, 0.01].
    """

    kind: Literal["choice"] = "choice"
    weights: _Probs | None = None


class Empirical(_Discrete):
    """Resamples observed ``values``; ``weights`` are relative frequencies (e.g. counts).

    Unlike ``choice``, weights need not sum to 1, only be ≥ 0 with a positive total. Moments are
    those of the resampling distribution (population variance, ddof=0).
    """

    kind: Literal["empirical"] = "empirical"
    weights: _Freqs | None = None
