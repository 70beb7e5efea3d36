"""Scenario schema for the `faults:` timeline (docs/models.md §6) and `autoscaling:` (§7, §8).

Network toxics take Toxiproxy's names and fields, with explicit units where Toxiproxy's would
differ from mqbed's (`latency: 50ms`, bandwidth `rate: 100KB/s`; see
:mod:`testbed.core.scenario_units`), with a `side` (which client group's link) and a `direction`
(upstream = client→broker, downstream = broker→client) and a `toxicity` (probability the toxic
applies to a connection).
"""

from __future__ import annotations

__all__ = [
    "BrokerFault",
    "ClientFault",
    "NetworkFault",
    "StochasticFault",
    "Fault",
    "TargetTracking",
    "StepScaling",
    "ElasticQueues",
    "Autoscaling",
    "NETWORK_TOXICS",
]

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from testbed.core.strict import Strict
from testbed.core.units import Bandwidth, Duration, Rate, Size, parse_duration

NonNeg = Annotated[Duration, Field(ge=0)]
Pos = Annotated[Duration, Field(gt=0)]


class BrokerFault(Strict):
    """Broker process faults. `duration` is how long the broker stays down/paused/alarmed."""

    kind: Literal["broker_kill", "broker_pause", "broker_restart", "memory_alarm", "disk_alarm"]
    at: NonNeg
    duration: NonNeg = 0.0
    target: str = "broker"
    """Node name ('broker' = the first/only node, or 'broker0', 'broker1', ...)."""

    @model_validator(mode="after")
    def _needs_duration(self) -> BrokerFault:
        if self.kind in ("broker_pause", "memory_alarm", "disk_alarm") and self.duration <= 0:
            raise ValueError(f"{self.kind} needs a positive duration (got {self.duration:g}s)")
        return self


class ClientFault(Strict):
    """Abrupt crash of client processes: no acks, no clean close. An instance retrying its
    connection (the broker is down) is a running process and crashes too; one that is itself
    restarting from a crash is not there to crash (a ``fault_skipped`` event)."""

    kind: Literal["consumer_crash", "producer_crash"]
    at: NonNeg
    target: str
    """Consumer or producer group name."""
    count: int = Field(1, ge=1)
    restart_after: NonNeg | None = None


NETWORK_TOXICS: dict[str, tuple[str, ...]] = {
    # kind -> required fields (Toxiproxy names)
    "latency": ("latency",),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": (),
    "slicer": ("average_size",),
    "limit_data": ("bytes",),
    "partition": (),
    "loss": ("probability",),
}
_OPTIONAL = {
    "latency": ("jitter",),
    "slicer": ("size_variation", "delay"),
    "reset_peer": ("timeout",),
    "partition": ("mode",),
    "loss": ("retransmit_delay",),
}


def _seconds(value: Any) -> Any:
    """A duration as seconds when it parses (else the value itself, for the schema to refuse)."""
    try:
        return parse_duration(value)
    except (TypeError, ValueError):
        return value


class NetworkFault(Strict):
    """A toxic on the fault proxy between a client group and the broker."""

    kind: Literal[
        "latency",
        "bandwidth",
        "slow_close",
        "timeout",
        "reset_peer",
        "slicer",
        "limit_data",
        "partition",
        "loss",
    ]
    at: NonNeg
    duration: Pos
    side: Literal["producers", "consumers", "all"] = "all"
    direction: Literal["upstream", "downstream", "both"] = "both"
    toxicity: float = Field(1.0, ge=0.0, le=1.0)
    latency: NonNeg | None = None
    jitter: NonNeg | None = None
    rate: Bandwidth | None = Field(None, gt=0)
    """bandwidth: through the link, with a unit: `100KB/s` (Toxiproxy's bare `100`), `1MB/s`."""
    delay: NonNeg | None = None
    timeout: NonNeg | None = None
    average_size: Size | None = Field(None, gt=0)
    size_variation: Size | None = Field(None, ge=0)
    bytes: Size | None = Field(None, ge=0)
    probability: float | None = Field(None, ge=0.0, le=1.0)
    retransmit_delay: NonNeg | None = None
    mode: Literal["refuse", "blackhole"] | None = None

    @model_validator(mode="after")
    def _fields_for_kind(self) -> NetworkFault:
        required = NETWORK_TOXICS[self.kind]
        allowed = set(required) | set(_OPTIONAL.get(self.kind, ()))
        missing = [f for f in required if getattr(self, f) is None]
        if missing:
            raise ValueError(f"toxic {self.kind!r} needs {', '.join(missing)}")
        extra = [
            f
            for f in (
                "latency",
                "jitter",
                "rate",
                "delay",
                "timeout",
                "average_size",
                "size_variation",
                "bytes",
                "probability",
                "retransmit_delay",
                "mode",
            )
            if f not in allowed and getattr(self, f) is not None
        ]
        if extra:
            raise ValueError(
                f"toxic {self.kind!r} does not take {', '.join(extra)} "
                f"(it takes {', '.join(sorted(allowed)) or 'no parameters'})"
            )
        return self


class StochasticFault(Strict):
    """Failure/repair with exponential times (accelerated, docs/models.md §6)."""

    kind: Literal["stochastic"]
    target: str
    """'broker' or a consumer group name."""
    mttf: Pos
    mttr: Pos
    at: NonNeg = 0.0
    until: NonNeg | None = None
    mode: Literal["kill", "pause", "crash"] = "kill"


Fault = Annotated[
    BrokerFault | ClientFault | NetworkFault | StochasticFault, Field(discriminator="kind")
]


class _Scaling(Strict):
    target: str
    """Consumer group that is scaled."""
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(10, ge=1, le=1000)
    interval: Pos = 1.0
    startup_delay: NonNeg = 0.0
    """Delay between the decision to add a consumer and it taking messages (docs/models.md §7)."""
    scale_up_stabilization: NonNeg = 0.0
    scale_down_stabilization: NonNeg = 30.0
    sla_latency: Pos | None = None
    """Report only: end-to-end latency above which a message violates the SLA."""

    @model_validator(mode="after")
    def _bounds(self) -> _Scaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})"
            )
        return self


class TargetTracking(_Scaling):
    """Kubernetes HPA / KEDA: desired = ceil(current × metric / target), ±tolerance."""

    policy: Literal["target_tracking"]
    metric: Literal["queue_length", "publish_rate", "drain_time"] = "queue_length"
    target_value: float = Field(gt=0)
    tolerance: float = Field(0.1, ge=0.0, lt=1.0)


class StepScaling(_Scaling):
    """Threshold policy: add `step` when load > max_load, remove when < min_load."""

    policy: Literal["step"]
    metric: Literal["queue_length", "publish_rate", "rate_ratio"] = "queue_length"
    min_load: float = Field(ge=0)
    max_load: float = Field(gt=0)
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _order(self) -> StepScaling:
        if self.min_load >= self.max_load:
            raise ValueError(f"min_load ({self.min_load:g}) must be < max_load ({self.max_load:g})")
        return self


class ElasticQueues(_Scaling):
    """Elastic load-balanced queues (docs/models.md §7) behind a `topology.load_balanced` alias."""

    policy: Literal["elastic"]
    alias: str
    min_load: float = Field(ge=0)
    max_load: float = Field(gt=0)
    period: Pos = 1.0
    slots_per_vm: int = Field(1, ge=1)
    vm_capacity: Rate = Field(gt=0)
    """Messages per second one whole host (VM) processes, all its `slots_per_vm` slots together:
    NPP's VM.capacity (docs/models.md §7). With one consumer per slot that is
    slots_per_vm / service_time."""
    sla_delta: float | None = Field(None, gt=0)
    """Expected production growth (msg/s²) for the pre-provisioned pool size NPP."""
    preprovisioned: int | None = Field(None, ge=0)
    """Pool size; default NPP computed from sla_delta, startup_delay and vm_capacity."""
    scale_down_step: float = Field(0.25, gt=0, le=1)
    """Pace of a scale-down: the fraction of the elected queue's (the one added last) forwarding
    ratio removed per period; it is removed once that reaches 0 and it is empty."""
    scale_down_stabilization: NonNeg = 30.0
    """No queue is elected for removal within this long after the last scale-up: the paper
    scales down slowly "to minimise wrong decisions", and the default keeps a rising ramp's
    scale-ups (a new queue is short, so the average may dip below min_load right after one)."""

    @model_validator(mode="before")
    @classmethod
    def _interval_is_period(cls, data: Any) -> Any:
        """The elastic policy acts every `period`; `interval` (the other policies' name) is
        accepted for it, but not both with different values: one of them would be ignored.
        (Equal values are what a run directory's resolved scenario holds.)"""
        if isinstance(data, dict) and "interval" in data:
            if "period" in data and _seconds(data["period"]) != _seconds(data["interval"]):
                raise ValueError(
                    "interval: give 'period' or 'interval', not both: for the elastic policy "
                    "they are the same setting (how often it acts)"
                )
            data = {k: v for k, v in data.items() if k != "interval"} | {"period": data["interval"]}
        return data

    @model_validator(mode="after")
    def _order(self) -> ElasticQueues:
        self.interval = self.period  # one setting: whoever reads `interval` sees the period
        if self.min_load >= self.max_load:
            raise ValueError(f"min_load ({self.min_load:g}) must be < max_load ({self.max_load:g})")
        return self


Autoscaling = Annotated[TargetTracking | StepScaling | ElasticQueues, Field(discriminator="policy")]
