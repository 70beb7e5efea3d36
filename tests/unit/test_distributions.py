"""Distributions: analytic moments, moment matching (docs/models.md §2), validation, samplers.

Expected numbers come from textbook formulas written out here, KS tests, or sampling —
never from the property under test.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from testbed.core.distributions import (
    FIT_CV_TOLERANCE,
    KINDS,
    Choice,
    Deterministic,
    Distribution,
    Empirical,
    Erlang,
    ExpErlang,
    Exponential,
    Fit,
    Gamma,
    Hyperexponential,
    HyperZero,
    Lognormal,
    Uniform,
    fit,
    parse_distribution,
)

N_SAMPLES = 200_000
Z = 5.0  # sampling tolerance in standard errors (seeded, so a fixed draw; 5σ leaves margin)

# SPECjms2007 interaction 1, Order message sizes (docs/models.md §1), in bytes
ORDER = Choice(values=[1740.0, 7100.0, 41010.0], weights=[0.95, 0.04, 0.01])


def _assert_sample_moments(xs: np.ndarray, mean: float, variance: float) -> None:
    """Sample mean and variance within Z standard errors (CLT; variance SE from the data)."""
    n = len(xs)
    se_mean = math.sqrt(variance / n)
    assert abs(xs.mean() - mean) <= Z * se_mean + 1e-12, (xs.mean(), mean, se_mean)
    dev2 = (xs - xs.mean()) ** 2
    se_var = dev2.std() / math.sqrt(n)
    assert abs(dev2.mean() - variance) <= Z * se_var + 1e-12, (dev2.mean(), variance, se_var)


# --- analytic moments per kind ---------------------------------------------------------------

HAND_MOMENTS = [
    # (distribution, mean, variance) from the textbook formulas
    (Exponential(mean=0.25), 0.25, 0.0625),
    (Deterministic(value=3.0), 3.0, 0.0),
    (Deterministic(kind="fixed", value=1024.0), 1024.0, 0.0),
    (Uniform(low=2.0, high=5.0), 3.5, 9.0 / 12.0),
    (Erlang(k=3, mean=6.0), 6.0, 12.0),  # 3 phases of mean 2: var 3·2²
    # 0.5/1 + 0.5/2 = 0.75; E[X²] = 2(0.5/1 + 0.5/4) = 1.25; var = 1.25 − 0.5625
    (Hyperexponential(p=[0.5, 0.5], rates=[1.0, 2.0]), 0.75, 0.6875),
    (Gamma(shape=2.0, mean=4.0), 4.0, 8.0),  # scale 2: var = 2·2²
    (Lognormal(mean=2.0, sd=3.0), 2.0, 9.0),
    # 0.95·1740 + 0.04·7100 + 0.01·41010 = 2347.1
    (ORDER, 2347.1, 0.95 * 1740**2 + 0.04 * 7100**2 + 0.01 * 41010**2 - 2347.1**2),
    (Choice(values=[1.0, 3.0]), 2.0, 1.0),
    (Empirical(values=[1.0, 2.0, 3.0, 4.0]), 2.5, 1.25),  # population variance
    (Empirical(values=[1.0, 2.0], weights=[3.0, 1.0]), 1.25, 0.1875),  # counts 3:1
    (HyperZero(p=0.25, rate=0.5), 0.5, 2 * 0.25 / 0.25 - 0.25),  # E[X²] = 2p/rate²
    (ExpErlang(mean1=1.0, k=4, mean2=2.0), 3.0, 1.0 + 4 * 0.5**2),
]


@pytest.mark.parametrize(("dist", "mean", "variance"), HAND_MOMENTS, ids=lambda x: str(x)[:40])
def test_analytic_moments(dist: Distribution, mean: float, variance: float) -> None:
    assert dist.mean == pytest.approx(mean, rel=1e-12)
    assert dist.variance == pytest.approx(variance, rel=1e-12, abs=1e-12)
    assert dist.sd == pytest.approx(math.sqrt(variance), rel=1e-12, abs=1e-12)
    assert dist.cv == pytest.approx(math.sqrt(variance) / mean, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("dist", "mean", "variance"), HAND_MOMENTS, ids=lambda x: str(x)[:40])
def test_samples_match_moments(dist: Distribution, mean: float, variance: float) -> None:
    xs = dist.sample_n(np.random.default_rng(7), N_SAMPLES)
    assert xs.shape == (N_SAMPLES,) and xs.dtype == np.float64
    _assert_sample_moments(xs, mean, variance)


def _ks_statistic(xs: np.ndarray, cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """Kolmogorov–Smirnov distance between the sample and a continuous CDF."""
    x = np.sort(xs)
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


def _erlang_cdf(k: int, scale: float) -> Callable[[np.ndarray], np.ndarray]:
    """1 − Σ_{j<k} e^{−x/θ}(x/θ)^j/j!"""

    def cdf(x: np.ndarray) -> np.ndarray:
        y = x / scale
        return 1 - np.exp(-y) * sum(y**j / math.factorial(j) for j in range(k))

    return cdf


def test_lognormal_parametrisation() -> None:
    """E = exp(μ + σ²/2), Var = (exp(σ²) − 1)·exp(2μ + σ²) for the underlying normal (μ, σ)."""
    mu, sigma = Lognormal(mean=2.0, sd=3.0).normal_params
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(2.0, rel=1e-12)
    assert math.expm1(sigma**2) * math.exp(2 * mu + sigma**2) == pytest.approx(9.0, rel=1e-12)


def test_shapes_pass_ks_test() -> None:
    """Samples follow the textbook CDFs (KS distance under the α = 0.001 critical value)."""
    rng = np.random.default_rng(11)
    n = 20_000
    critical = 1.95 / math.sqrt(n)
    mu, sigma = Lognormal(mean=2.0, sd=3.0).normal_params
    erf = np.vectorize(math.erf)
    cases: list[tuple[Distribution, Callable[[np.ndarray], np.ndarray]]] = [
        (Exponential(mean=0.25), lambda x: 1 - np.exp(-x / 0.25)),
        (Uniform(low=2.0, high=5.0), lambda x: (x - 2.0) / 3.0),
        (Erlang(k=3, mean=6.0), _erlang_cdf(3, 2.0)),
        (Gamma(shape=4.0, mean=2.0), _erlang_cdf(4, 0.5)),
        (
            Lognormal(mean=2.0, sd=3.0),
            lambda x: 0.5 * (1 + erf((np.log(x) - mu) / (sigma * math.sqrt(2)))),
        ),
        (
            Hyperexponential(p=[0.3, 0.7], rates=[1.0, 5.0]),
            lambda x: 1 - 0.3 * np.exp(-x) - 0.7 * np.exp(-5 * x),
        ),
    ]
    for dist, cdf in cases:
        assert _ks_statistic(dist.sample_n(rng, n), cdf) < critical, dist


def test_discrete_frequencies() -> None:
    xs = ORDER.sample_n(np.random.default_rng(3), N_SAMPLES)
    for value, prob in [(1740.0, 0.95), (7100.0, 0.04), (41010.0, 0.01)]:
        share = float(np.mean(xs == value))
        assert abs(share - prob) <= Z * math.sqrt(prob * (1 - prob) / N_SAMPLES)
    ys = Empirical(values=[5.0, 6.0, 7.0]).sample_n(np.random.default_rng(3), 30_000)
    assert set(np.unique(ys)) == {5.0, 6.0, 7.0}


# --- fit(): docs/models.md §2 moment matching ---------------------------------------------------


def _fitted_moments(d: Distribution) -> tuple[float, float]:
    """Mean and variance from the fitted shape's parameters, by the textbook formulas."""
    if isinstance(d, Exponential):
        return d.mean, d.mean**2
    if isinstance(d, Deterministic):
        return d.value, 0.0
    if isinstance(d, Erlang):
        return d.mean, d.k * (d.mean / d.k) ** 2
    if isinstance(d, HyperZero):
        return d.p / d.rate, 2 * d.p / d.rate**2 - (d.p / d.rate) ** 2
    assert isinstance(d, ExpErlang)
    return d.mean1 + d.mean2, d.mean1**2 + d.k * (d.mean2 / d.k) ** 2


@pytest.mark.parametrize(
    ("mean", "cv", "kind"),
    [
        (0.01, 0.0, "deterministic"),
        (0.01, 0.01, "erlang"),  # (μ/σ)² = 10000 (to float noise): Erlang(10000)
        (0.01, 0.0123, "exp_erlang"),
        (2.0, 0.3, "exp_erlang"),
        (2.0, 0.5, "erlang"),  # (μ/σ)² = 4 exactly: s-transition degenerates to Erlang(4)
        (2.0, 1 / math.sqrt(2), "erlang"),
        (2.0, 0.7, "exp_erlang"),
        (2.0, 1 - 1e-6, "exp_erlang"),
        (2.0, 1.0, "exponential"),
        (2.0, 1 + 0.5 * FIT_CV_TOLERANCE, "exponential"),
        (2.0, 1 + 1e-6, "hyper_zero"),
        (2.0, 2.3, "hyper_zero"),
        (5e-4, 10.0, "hyper_zero"),
    ],
)
def test_fit_matches_mean_and_sd(mean: float, cv: float, kind: str) -> None:
    sd = cv * mean
    d = fit(mean, sd)
    assert d.kind == kind
    m, var = _fitted_moments(d)
    assert abs(m - mean) <= 1e-9 * mean
    assert abs(math.sqrt(var) - sd) <= 1e-9 * mean
    # the properties agree with the parameters
    assert abs(d.mean - mean) <= 1e-9 * mean and abs(d.sd - sd) <= 1e-9 * mean


def test_fit_cv_above_one_is_the_watson_desrochers_shape() -> None:
    mu, sigma = 2.0, 4.6  # cv 2.3
    d = fit(mu, sigma)
    assert isinstance(d, HyperZero)
    assert d.p == pytest.approx(2 * mu**2 / (mu**2 + sigma**2), rel=1e-15)
    assert d.rate == pytest.approx(2 * mu / (mu**2 + sigma**2), rel=1e-15)


def test_fit_cv_below_one_uses_gamma_phases_in_the_stated_range() -> None:
    mu, sigma = 2.0, 0.6  # (μ/σ)² = 11.11 → γ = 11
    d = fit(mu, sigma)
    assert isinstance(d, ExpErlang)
    assert (mu / sigma) ** 2 - 1 <= d.k < (mu / sigma) ** 2
    assert d.k == 11
    root = math.sqrt(11 * 12 * sigma**2 - 11 * mu**2)
    assert d.mean1 == pytest.approx((mu - root) / 12, rel=1e-12)
    assert d.mean2 == pytest.approx((11 * mu + root) / 12, rel=1e-12)
    assert d.mean1 > 0 and d.mean2 > 0


@pytest.mark.parametrize("cv", [0.0, 0.3, 0.5, 1.0, 2.3])
def test_fit_samples_match_targets(cv: float) -> None:
    mean = 0.004
    sd = cv * mean
    model = Fit(mean=mean, sd=sd)
    xs = model.sample_n(np.random.default_rng(2024), N_SAMPLES)
    if cv == 0:
        assert np.all(xs == mean)
        return
    _assert_sample_moments(xs, mean, sd**2)
    assert (xs >= 0).all()


def test_fit_model_resolves_at_construction_and_round_trips() -> None:
    model = parse_distribution({"kind": "fit", "mean": 0.5, "sd": 1.15})
    assert isinstance(model, Fit)
    assert model.resolved == fit(0.5, 1.15)
    assert (model.mean, model.sd) == (0.5, 1.15)
    assert model.model_dump() == {"kind": "fit", "mean": 0.5, "sd": 1.15}
    again = parse_distribution(model.model_dump())
    assert again == model and again.resolved == model.resolved


def test_fit_rejects_bad_targets() -> None:
    with pytest.raises(ValueError, match="-1"):
        fit(-1.0, 0.5)
    with pytest.raises(ValueError, match="nan"):
        fit(1.0, float("nan"))


# --- the pydantic contract ---------------------------------------------------------------


def test_parse_every_kind_and_use_as_field() -> None:
    class Spec(BaseModel):
        service: Distribution

    examples: list[dict[str, Any]] = [
        {"kind": "exponential", "mean": 1},
        {"kind": "deterministic", "value": 0.005},
        {"kind": "fixed", "value": 200},
        {"kind": "uniform", "low": 1, "high": 2},
        {"kind": "erlang", "k": 3.0, "mean": 1},
        {"kind": "hyperexponential", "p": [0.2, 0.8], "rates": [1, 10]},
        {"kind": "gamma", "shape": 0.5, "mean": 1},
        {"kind": "lognormal", "mean": 1, "sd": 0.5},
        {"kind": "choice", "values": [1, 2], "weights": [0.5, 0.5]},
        {"kind": "empirical", "values": [1, 2, 3]},
        {"kind": "fit", "mean": 1, "sd": 2},
        {"kind": "hyper_zero", "p": 0.5, "rate": 2},
        {"kind": "exp_erlang", "mean1": 0.1, "k": 2, "mean2": 0.9},
    ]
    assert sorted(e["kind"] for e in examples) == sorted(KINDS)
    for ex in examples:
        d = parse_distribution(ex)
        assert d.kind == ex["kind"]
        assert Spec(service=ex).service == d  # type: ignore[arg-type]
        assert parse_distribution(d.model_dump(mode="json")) == d
    erlang = parse_distribution({"kind": "erlang", "k": 3.0, "mean": 1})
    assert isinstance(erlang, Erlang) and type(erlang.k) is int


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"kind": "exponential", "mean": -1}, "got -1"),
        ({"kind": "exponential", "mean": 0}, "got 0"),
        ({"kind": "exponential", "mean": float("inf")}, "got inf"),
        ({"kind": "deterministic", "value": -0.5}, "got -0.5"),
        ({"kind": "uniform", "low": 3, "high": 1}, "low=3.0 high=1.0"),
        ({"kind": "erlang", "k": 2.5, "mean": 1}, "got 2.5"),
        ({"kind": "erlang", "k": 0, "mean": 1}, "integer ≥ 1, got 0"),
        ({"kind": "hyperexponential", "p": [0.5, 0.4], "rates": [1, 2]}, "got 0.9"),
        ({"kind": "hyperexponential", "p": [1.5, -0.5], "rates": [1, 2]}, "got 1.5"),
        ({"kind": "hyperexponential", "p": [0.5, 0.5], "rates": [1, -2]}, "got -2"),
        ({"kind": "hyperexponential", "p": [0.5, 0.5], "rates": [1]}, "got 2 and 1"),
        ({"kind": "gamma", "shape": 0, "mean": 1}, "got 0"),
        ({"kind": "lognormal", "mean": 1, "sd": -2}, "got -2"),
        ({"kind": "choice", "values": [1, 2], "weights": [95, 5]}, "got 95"),
        ({"kind": "choice", "values": [1, 2], "weights": [1.0]}, "got 2 and 1"),
        ({"kind": "empirical", "values": [1, 2], "weights": [0, 0]}, "positive total"),
        ({"kind": "fit", "mean": 1, "sd": -0.1}, "got -0.1"),
        ({"kind": "exponental", "mean": 1}, "'exponental'"),
        ({"kind": "exponential", "mean": 1, "meen": 1}, "meen"),
    ],
)
def test_validation_errors_carry_the_value(data: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_distribution(data)
    assert fragment in str(info.value)


def test_probabilities_sum_within_1e_9() -> None:
    Hyperexponential(p=[0.3, 0.7 + 5e-10], rates=[1, 2])  # accepted
    with pytest.raises(ValidationError):
        Hyperexponential(p=[0.3, 0.7 + 5e-9], rates=[1, 2])


def test_models_are_frozen() -> None:
    d = Exponential(mean=1.0)
    with pytest.raises(ValidationError):
        d.mean = 2.0  # type: ignore[misc]


# --- samplers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dist",
    [Exponential(mean=1.0), ORDER, fit(1.0, 0.3), fit(1.0, 2.3), Lognormal(mean=1.0, sd=0.5)],
    ids=lambda d: d.kind,
)
def test_sampler_stream_is_reproducible(dist: Distribution) -> None:
    n = 10_000  # crosses the 4096 batch boundary twice
    a = dist.sampler(np.random.default_rng(42))
    b = dist.sampler(np.random.default_rng(42))
    c = dist.sampler(np.random.default_rng(43))
    xa, xb, xc = ([s() for _ in range(n)] for s in (a, b, c))
    assert xa == xb
    assert xa != xc
    assert all(isinstance(x, float) for x in xa[:10])
    rng = np.random.default_rng(42)
    batches = np.concatenate([dist.sample_n(rng, 4096) for _ in range(3)])
    assert xa == batches[:n].tolist()


def test_deterministic_sampler_and_sample() -> None:
    d = Deterministic(value=0.5)
    s = d.sampler(np.random.default_rng(0))
    assert [s(), s()] == [0.5, 0.5]
    assert d.sample(np.random.default_rng(0)) == 0.5


def test_sample_returns_float() -> None:
    rng = np.random.default_rng(0)
    for dist, _, _ in HAND_MOMENTS:
        assert isinstance(dist.sample(rng), float)


def test_sampler_is_fast() -> None:
    """Generous bound (≤ 2 µs per value) so the test is not flaky; typical is ~0.1 µs."""
    s = fit(1.0, 2.3).sampler(np.random.default_rng(0))
    n = 200_000
    start = time.perf_counter()
    for _ in range(n):
        s()
    assert (time.perf_counter() - start) / n < 2e-6
