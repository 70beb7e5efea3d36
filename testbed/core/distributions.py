"""Distributions that know their moments (docs/models.md §2).

One spec object feeds Locust pacing, the SimPy sampler and the closed forms: every distribution
is a frozen pydantic model with a ``kind`` discriminator, the analytic ``mean``, ``variance``,
``sd`` and ``cv``, and three ways to draw:

- ``sample(rng)``: one float (convenient, a few µs);
- ``sample_n(rng, n)``: a numpy array;
- ``sampler(rng)``: a zero-argument callable for the simulator's hot loop; it draws numpy batches
  of ``batch`` values and hands them out one by one (well under 1 µs per value). Its stream is
  exactly ``sample_n(rng, batch)`` followed by the next batch, so a seeded ``Generator`` makes it
  reproducible; it advances ``rng`` a whole batch at a time.

All numbers are plain floats in base units (seconds, bytes); the scenario loader converts "5ms"
or "1KB" before these models see the data. Models are frozen (fields cannot be reassigned) and,
like every scenario model, reject unknown keys (the scenario loader adds "did you mean").

``fit(mean, sd)`` moment-matches by coefficient of variation (Watson & Desrochers s-transitions,
docs/models.md §2); the ``Fit`` model (kind ``"fit"``) resolves to the same object at construction.
"""

from __future__ import annotations

__all__ = [
    "FIT_CV_TOLERANCE",
    "KINDS",
    "Choice",
    "Deterministic",
    "Distribution",
    "Empirical",
    "Erlang",
    "ExpErlang",
    "Exponential",
    "Fit",
    "Gamma",
    "HyperZero",
    "Hyperexponential",
    "Lognormal",
    "Uniform",
    "fit",
    "parse_distribution",
]

import math
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    model_validator,
)

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


# --- the kinds -------------------------------------------------------------------------------


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


# --- moment matching -------------------------------------------------------------------------


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


# --- the union the scenario schema uses ------------------------------------------------------

KINDS: tuple[str, ...] = (
    "exponential", "deterministic", "fixed", "uniform", "erlang", "hyperexponential", "gamma",
    "lognormal", "choice", "empirical", "fit", "hyper_zero", "exp_erlang",
)  # fmt: skip
"""Every accepted ``kind``."""


Distribution = Annotated[
    Exponential
    | Deterministic
    | Uniform
    | Erlang
    | Hyperexponential
    | Gamma
    | Lognormal
    | Choice
    | Empirical
    | Fit
    | HyperZero
    | ExpErlang,
    Field(discriminator="kind"),
]
"""Any distribution, discriminated by ``kind``; use it as a pydantic field type."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(Distribution, config=ConfigDict(title="distribution"))


def parse_distribution(obj: Any) -> Distribution:
    """Validate a mapping such as ``{"kind": "erlang", "k": 3, "mean": 0.01}``.

    Raises ``pydantic.ValidationError`` (a ``ValueError``) naming the field and the bad value.
    """
    return _ADAPTER.validate_python(obj)  # type: ignore[no-any-return]
