"""Quantity types of the scenario schema: distributions of durations and sizes whose
parameters take units (``mean: 5ms``, a bare ``"1KB"`` meaning fixed 1000 bytes), and the
constrained durations, rates and names its fields use."""

from __future__ import annotations

__all__ = [
    "Name",
    "NonNegDuration",
    "NonNegRate",
    "PosDuration",
    "PosRate",
    "SizeDistribution",
    "TimeDistribution",
]

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from testbed.core.distributions import Distribution
from testbed.core.units import Duration, Rate, parse_duration, parse_rate, parse_size

_TIME_KEYS = {"mean", "sd", "value", "low", "high", "mean1", "mean2"}
_RATE_KEYS = {"rate", "rates"}


def _dist_converter(dimension: str) -> Any:
    parse = parse_duration if dimension == "time" else parse_size
    default_kind = "deterministic" if dimension == "time" else "fixed"

    def convert(value: Any) -> Any:
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            return {"kind": default_kind, "value": parse(value)}
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for key, item in value.items():
            try:
                if key in _TIME_KEYS and item is not None:
                    out[key] = parse(item)
                elif key in ("values",) and isinstance(item, list):
                    out[key] = [parse(v) for v in item]
                elif key in _RATE_KEYS and dimension == "time":
                    out[key] = (
                        [parse_rate(v) for v in item]
                        if isinstance(item, list)
                        else parse_rate(item)
                    )
            except ValueError as e:
                raise ValueError(f"{key}: {e}") from e
        return out

    return BeforeValidator(convert)


TimeDistribution = Annotated[Distribution, _dist_converter("time")]
"""A distribution of durations (seconds). A bare ``"5ms"`` means deterministic 5 ms."""
SizeDistribution = Annotated[Distribution, _dist_converter("size")]
"""A distribution of message sizes (bytes). A bare ``"1KB"`` means fixed 1000 bytes."""

NonNegDuration = Annotated[Duration, Field(ge=0)]
PosDuration = Annotated[Duration, Field(gt=0)]
PosRate = Annotated[Rate, Field(gt=0)]
NonNegRate = Annotated[Rate, Field(ge=0)]
Name = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-]+$")]
