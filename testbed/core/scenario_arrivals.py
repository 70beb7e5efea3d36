"""Arrival processes of a producer (docs/models.md §1): Poisson, constant, MMPP, ramp,
steps, a replayed trace, and the closed loop; ``arrival: 50/s`` is shorthand for Poisson."""

from __future__ import annotations

__all__ = [
    "Arrival",
    "ClosedArrival",
    "ConstantArrival",
    "MmppArrival",
    "PoissonArrival",
    "RampArrival",
    "RateStep",
    "StepsArrival",
    "TraceArrival",
]

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from testbed.core.scenario_quantities import (
    NonNegDuration,
    NonNegRate,
    PosDuration,
    PosRate,
    TimeDistribution,
)
from testbed.core.strict import Strict


class PoissonArrival(Strict):
    kind: Literal["poisson"]
    rate: PosRate


class ConstantArrival(Strict):
    kind: Literal["constant"]
    rate: PosRate


class MmppArrival(Strict):
    """Markov-modulated Poisson: state i emits at rates[i] for an exponential sojourn."""

    kind: Literal["mmpp"]
    rates: list[NonNegRate] = Field(min_length=2)
    mean_sojourns: list[PosDuration] = Field(min_length=2)

    @model_validator(mode="after")
    def _same_length(self) -> MmppArrival:
        if len(self.rates) != len(self.mean_sojourns):
            raise ValueError(
                f"rates has {len(self.rates)} entries but mean_sojourns has "
                f"{len(self.mean_sojourns)}; give one sojourn per state"
            )
        return self


class RampArrival(Strict):
    """Rate moves linearly from `from` to `to` over `over`, then stays at `to`."""

    kind: Literal["ramp"]
    from_: NonNegRate = Field(alias="from")
    to: NonNegRate
    over: PosDuration
    process: Literal["poisson", "constant"] = "poisson"


class RateStep(Strict):
    at: NonNegDuration
    rate: NonNegRate


class StepsArrival(Strict):
    """Piecewise-constant rate: each step holds from its `at` to the next step."""

    kind: Literal["steps"]
    steps: list[RateStep] = Field(min_length=1)
    process: Literal["poisson", "constant"] = "poisson"

    @field_validator("steps")
    @classmethod
    def _increasing(cls, steps: list[RateStep]) -> list[RateStep]:
        for a, b in zip(steps, steps[1:], strict=False):
            if b.at <= a.at:
                raise ValueError(f"step times must increase: {b.at:g}s follows {a.at:g}s")
        return steps


class TraceArrival(Strict):
    """Replay send times (seconds from start, one per line or a CSV column `t`)."""

    kind: Literal["trace"]
    file: str
    """Relative to the scenario's directory and inside it once `..` and symlinks are resolved:
    no absolute path, since a scenario may come from someone else (to use a trace kept
    elsewhere, copy it there). At most 8 MiB; the run directory keeps a copy."""
    loop: bool = False
    times: list[float] = Field(default_factory=list, exclude=True)
    """Filled by the loader from `file` (resolved relative to the scenario file)."""


class ClosedArrival(Strict):
    """Closed loop: think, then send and block until the send completes (confirmed)."""

    kind: Literal["closed"]
    think_time: TimeDistribution


Arrival = Annotated[
    PoissonArrival
    | ConstantArrival
    | MmppArrival
    | RampArrival
    | StepsArrival
    | TraceArrival
    | ClosedArrival,
    Field(discriminator="kind"),
]


def _rate_shorthand(value: Any) -> Any:
    """`arrival: 50/s` means Poisson at 50/s."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return {"kind": "poisson", "rate": value}
    return value
