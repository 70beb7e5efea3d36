"""Calibration profiles (docs/models.md §9): what a prediction may know about a broker on a host.

A profile is made by separate calibration runs (``mqbed calibrate``) and stored as YAML under
``deploy/calibration/``. It is the only measured input of a prediction (docs/architecture.md,
principle 5): the simulator and the closed forms read the scenario and this, never the run they
predict.

All times are seconds, sizes bytes, "a + b·size" fits have ``a`` in s and ``b`` in s/byte.

- ``network_delay``: one-way client↔broker delay d.
- ``latency``: per configuration (``base`` = persistent, direct exchange, one producer, one
  consumer, manual ack; ``prefetch1``; ``confirms``) the end-to-end publish→deliver latency fit,
  measured at a low and a high rate (``low_load``/``high_load``, each with its ``rate`` and
  optionally the latency ``sd`` around the fit, which gives light-load percentiles a spread).
- ``persistence``: extra time before a publisher confirm for a persistent message.
- ``confirm_overhead``/``prefetch_overhead``: regressions of the latency differences
  confirms − base and prefetch1 − base.
- ``routing.per_destination``: broker time per extra bound queue of a fan-out (§3c).
- ``publish_time``: client time per publish without confirms; ``write_time``: publish → confirm
  of a transient ``reference_size`` message; ``read_time``: deliver → ack with no processing.
  Each a mean and sd, sampled through ``testbed.core.distributions.fit`` (docs/models.md §2).
- ``queue_service``: per-message time of a queue process (its capacity, §3c).
- ``threads``: the `threads` model's broker stages (§3a): the per-message service of the
  receive (enqueue) stage and the dispatch (deliver) stage, and the thread count of each stage
  calibration assumed (one count for both, or ``{receive, dispatch}``; informational: the
  scenario's ``broker.threads`` sets the model's threads, so that a resolved scenario file
  predicts exactly what the original does).
- ``memory``: flow control: bytes accounted per queued message and the blocking threshold.
- ``client_path``: empirical delay tables measured through the live workload with one client
  library (`testbed.core.client_path`): the delivery path and the consumer's hold.
- ``restart_time``: how long the broker takes from a restart after a kill until it is healthy
  again, measured on the machine (`testbed.calibration.restart`); without it the simulator uses
  the per-kind constant of `testbed.core.availability`.
"""

from __future__ import annotations

__all__ = [
    "Profile",
    "LinearCost",
    "LatencyFit",
    "LatencyVariants",
    "MomentFit",
    "RestartTime",
    "ColdStart",
    "BrokerInfo",
    "RoutingCost",
    "ThreadsSpec",
    "MemorySpec",
    "PROFILE_DIR",
    "default_profile",
    "shipped_profile_path",
    "DEFAULT_CLIENT",
    "load_profile",
]

import math
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError

from testbed.core.broker_kinds import DEFAULT_KIND, KINDS, KindName
from testbed.core.client_path import ClientPath
from testbed.core.distributions import (
    Deterministic,
    Erlang,
    ExpErlang,
    Exponential,
    HyperZero,
    fit,
)
from testbed.core.strict import Strict
from testbed.core.suggest import did_you_mean
from testbed.core.threads import ThreadCount
from testbed.exceptions import ConfigurationError

PROFILE_DIR = Path(__file__).resolve().parents[2] / "deploy" / "calibration"
"""Where `default_profile` looks: ``deploy/calibration/<kind>-local.yaml``."""

Fitted = Exponential | Deterministic | HyperZero | ExpErlang | Erlang
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Pos = Annotated[float, Field(gt=0, allow_inf_nan=False)]


class LinearCost(Strict):
    """t(size) = a + b·size, with the regression's quality when it was measured."""

    a: NonNeg = 0.0
    b: NonNeg = 0.0
    r: float | None = Field(None, ge=-1, le=1)
    """Pearson r of the fit (None for estimates)."""
    r2: float | None = Field(None, ge=0, le=1)

    def at(self, size: float) -> float:
        return self.a + self.b * size


class LatencyFit(LinearCost):
    rate: Pos
    """Messages per second at which the fit was measured."""
    sd: NonNeg = 0.0
    """Standard deviation of the latency around the fit (0: the fit is a constant path)."""


class LatencyVariants(Strict):
    low_load: LatencyFit
    high_load: LatencyFit

    def for_rate(self, rate: float) -> LatencyFit:
        """The variant measured nearest (in log-rate) to ``rate`` msg/s (§3c)."""
        if rate <= 0:
            return self.low_load
        lo = abs(math.log(rate / self.low_load.rate))
        hi = abs(math.log(rate / self.high_load.rate))
        return self.low_load if lo < hi else self.high_load


class MomentFit(Strict):
    """A duration known by mean and sd; sampled as ``fit(mean, sd)`` (docs/models.md §2)."""

    mean: NonNeg
    sd: NonNeg = 0.0

    def distribution(self, shift: float = 0.0) -> Fitted:
        """The fitted distribution of ``max(mean + shift, 0)`` with this sd (0 → constant 0)."""
        m = max(self.mean + shift, 0.0)
        if m == 0.0:
            return Deterministic(value=0.0)
        return fit(m, self.sd)


class ColdStart(Strict):
    """A freshly restarted broker's slow first seconds: its deliveries take
    ``extra_s · exp(-t / tau_s)`` longer, t seconds after it is healthy again
    (`testbed.calibration.cold_start`)."""

    extra_s: NonNeg
    """Extra delivery latency at the moment the broker is healthy (s)."""
    tau_s: float = Field(gt=0)
    """Its decay time (s)."""
    rate: float = Field(gt=0)
    """msg/s of the stream it was measured on."""

    def at(self, t: float) -> float:
        """The extra latency (s) of a delivery `t` seconds after the broker was healthy."""
        return self.extra_s * math.exp(-t / self.tau_s) if t >= 0.0 else 0.0


class RestartTime(MomentFit):
    """A broker's restart after a kill until healthy (s), over ``samples`` measurements."""

    samples: int = Field(1, ge=1)
    date: str = ""
    """When it was measured (ISO 8601)."""
    ack_loss_s: float | None = Field(None, ge=0)
    """Seconds of consumers' acks of persistent messages a kill forgets (those messages are
    delivered again after the restart: duplicates); None: not measured, the broker kind's
    figure applies (`testbed.core.availability.ack_loss_seconds`)."""
    acks_forgotten: list[int] = Field(default_factory=list)
    """Acks each measured kill forgot (at `testbed.calibration.ack_loss.RATE` msg/s)."""
    kill_s: float | None = Field(None, ge=0)
    """Seconds after a kill's signal that clients still publish and ack into the dying broker
    (its sockets close only when the process has exited): the publishes the calibration kills
    lost in flight over the publish rate, else the signal → process gone time; None: not
    measured, the broker kind's figure applies (`testbed.core.availability.
    kill_teardown_seconds`)."""
    cold: ColdStart | None = None
    """The slow first seconds after a restart (None: not measured, none applied)."""


class BrokerInfo(Strict):
    kind: KindName
    version: str


class RoutingCost(Strict):
    per_destination: NonNeg = 0.0
    """Broker time per extra queue a message is routed to (fan-out cost)."""


class ThreadsSpec(Strict):
    count: ThreadCount = 1
    """Threads per stage calibration assumed: one count for both or {receive, dispatch}."""
    receive: MomentFit = Field(default_factory=lambda: MomentFit(mean=0.0))
    dispatch: MomentFit = Field(default_factory=lambda: MomentFit(mean=0.0))


class MemorySpec(Strict):
    per_message_overhead: NonNeg = 0.0
    """Bytes accounted per queued message on top of its body."""
    base_bytes: NonNeg = 0.0
    """Memory the broker uses with empty queues (reported in timeseries.memory_bytes)."""
    high_watermark: float = Field(1.0, gt=0, le=1)
    """Publishers block when accounted message bytes exceed this fraction of
    the scenario's ``broker.memory_limit``."""


class Profile(Strict):
    source: Literal["measured", "facts-estimate", "synthetic"]
    host: str
    broker: BrokerInfo
    date: str
    reference_size: Pos = 200.0
    network_delay: NonNeg
    latency: dict[Literal["base", "prefetch1", "confirms"], LatencyVariants]
    persistence: LinearCost = Field(default_factory=LinearCost)
    confirm_overhead: LinearCost = Field(default_factory=LinearCost)
    prefetch_overhead: LinearCost = Field(default_factory=LinearCost)
    routing: RoutingCost = Field(default_factory=RoutingCost)
    publish_time: MomentFit = Field(default_factory=lambda: MomentFit(mean=0.0))
    write_time: MomentFit = Field(default_factory=lambda: MomentFit(mean=0.0))
    read_time: MomentFit = Field(default_factory=lambda: MomentFit(mean=0.0))
    queue_service: LinearCost = Field(default_factory=LinearCost)
    threads: ThreadsSpec = Field(default_factory=ThreadsSpec)
    memory: MemorySpec = Field(default_factory=MemorySpec)
    client_path: ClientPath | None = None
    """Delays measured through the live workload (`testbed.core.client_path`): when present,
    the simulator samples the delivery path and the consumer's hold from these tables."""
    restart_time: RestartTime | None = None
    """Kill → healthy again, measured on this machine (``None``: the per-kind constant)."""
    notes: str = ""

    def base_latency(self, rate: float) -> LatencyFit:
        """The base-configuration latency fit for a queue offered ``rate`` msg/s."""
        if "base" not in self.latency:
            return LatencyFit(rate=1.0)
        return self.latency["base"].for_rate(rate)

    @classmethod
    def zero(cls, kind: KindName = DEFAULT_KIND, **changes: object) -> Profile:
        """A synthetic profile with every cost zero (for theory checks); override by keyword."""
        data: dict[str, object] = {
            "source": "synthetic",
            "host": "none",
            "broker": {"kind": kind, "version": "model"},
            "date": "1970-01-01",
            "network_delay": 0.0,
            "latency": {},
        }
        data.update(changes)
        return cls.model_validate(data)


def load_profile(path: str | Path) -> Profile:
    """Load and validate a profile YAML; errors name the file and the field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigurationError(f"{p}: cannot read calibration profile: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigurationError(f"{p}: calibration profile is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigurationError(f"{p}: a calibration profile must be a mapping of fields")
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise ConfigurationError(f"{p}: " + "; ".join(_problems(e))) from e


def _problems(e: ValidationError) -> list[str]:
    """One short line per validation error: field path, message, offending value."""
    out = []
    for err in e.errors():
        loc = [str(x) for x in err["loc"]]
        where = ".".join(loc)
        value = err.get("input")
        if err["type"] == "extra_forbidden":
            hint = did_you_mean(loc[-1], Profile.model_fields) if len(loc) == 1 else ""
            out.append(f"{where}: unknown field{hint}")
        elif isinstance(value, dict | list):
            out.append(f"{where}: {err['msg']}")
        else:
            out.append(f"{where}: {err['msg']} (got {value!r})")
    return out


DEFAULT_CLIENT = {name: kind.default_client for name, kind in KINDS.items()}
"""Broker kind -> its default client library (`KindFacts.default_client`)."""


def shipped_profile_path(kind: str, client: str | None = None) -> Path:
    """``deploy/calibration/<kind>-local.yaml`` for the broker's default client library,
    ``<kind>-<client>-local.yaml`` for another one (falling back to the default's file)."""
    if kind not in DEFAULT_CLIENT:
        raise ConfigurationError(f"no default calibration profile for broker kind {kind!r}")
    if client is not None and client != DEFAULT_CLIENT[kind]:
        own = PROFILE_DIR / f"{kind}-{client}-local.yaml"
        if own.exists():
            return own
    return PROFILE_DIR / f"{kind}-local.yaml"


def default_profile(kind: str, client: str | None = None) -> Profile:
    """The shipped profile for broker ``kind`` and client library ``client``."""
    return load_profile(shipped_profile_path(kind, client))
