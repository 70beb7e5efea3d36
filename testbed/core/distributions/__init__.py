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

from typing import Annotated, Any

from pydantic import ConfigDict, Field, TypeAdapter

from testbed.core.distributions.base import FIT_CV_TOLERANCE
from testbed.core.distributions.laws import (
    Choice,
    Deterministic,
    Empirical,
    Erlang,
    Exponential,
    Gamma,
    Hyperexponential,
    Lognormal,
    Uniform,
)
from testbed.core.distributions.moments import ExpErlang, Fit, HyperZero, fit

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
