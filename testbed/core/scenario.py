"""The scenario schema: one YAML file drives the live run, the prediction and the analysis.

Every model forbids unknown keys (and suggests the closest known one). Quantities take units:
durations ``"250ms"``, rates ``"50/s"``, sizes ``"1KB"`` (see :mod:`testbed.core.units`).
Load files with :func:`load_scenario` (in :mod:`testbed.core.scenario_loader`), which reports
``file:line field: message (did you mean ...)`` for every problem at once.

Rates on producers are per producer instance: ``count: 2`` with ``rate: 100/s`` offers 200/s.
"""

from __future__ import annotations

__all__ = [
    "Scenario",
    "BrokerSpec",
    "TopologySpec",
    "ExchangeSpec",
    "QueueSpec",
    "BindingSpec",
    "VisibilitySpec",
    "LoadBalancedSpec",
    "ProducerSpec",
    "ConsumerSpec",
    "FollowUpSpec",
    "Arrival",
    "PoissonArrival",
    "ConstantArrival",
    "MmppArrival",
    "RampArrival",
    "StepsArrival",
    "TraceArrival",
    "ClosedArrival",
    "TimeDistribution",
    "SizeDistribution",
    "AccuracyTargets",
    "RecordingSpec",
    "Strict",
]

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    model_validator,
)

from testbed.core.broker_kinds import DEFAULT_KIND, KINDS, ClientName, KindName
from testbed.core.distributions import Deterministic
from testbed.core.scenario_arrivals import (
    Arrival,
    ClosedArrival,
    ConstantArrival,
    MmppArrival,
    PoissonArrival,
    RampArrival,
    StepsArrival,
    TraceArrival,
    _rate_shorthand,
)
from testbed.core.scenario_faults import Autoscaling, Fault
from testbed.core.scenario_quantities import (
    Name,
    NonNegDuration,
    PosDuration,
    SizeDistribution,
    TimeDistribution,
)
from testbed.core.strict import Strict
from testbed.core.threads import ThreadCount
from testbed.core.thresholds import parse_threshold
from testbed.core.units import Size

# --- broker and topology --------------------------------------------------------------------


class BrokerSpec(Strict):
    kind: KindName = DEFAULT_KIND
    backend: Literal["local", "docker", "external"] = "local"
    client: ClientName | None = None
    """Client library; defaults to pika for RabbitMQ and stomp for ActiveMQ."""
    nodes: int = Field(1, ge=1, le=5)
    model: Literal["amqp", "threads", "shared_lock"] | None = None
    """Emulator service model (docs/models.md §3); default amqp (RabbitMQ), threads (ActiveMQ)."""
    threads: ThreadCount = 1
    """Servers of the `threads` model's stages (each 1–1024): one count for both, or
    `{receive: N1, dispatch: N2}` (docs/models.md §3a, §4)."""
    memory_limit: Size = Field(default=256e6, gt=0)
    urls: list[str] = Field(default_factory=list)
    """External backend only: broker URLs (amqp://user:pass@127.0.0.1:5672/ or stomp://...)."""

    @model_validator(mode="after")
    def _defaults(self) -> BrokerSpec:
        if self.client is None:
            self.client = KINDS[self.kind].default_client  # type: ignore[assignment]
        if self.model is None:
            self.model = KINDS[self.kind].model
        return self


class ExchangeSpec(Strict):
    name: Name
    type: Literal["direct", "topic", "fanout"] = "direct"
    durable: bool = True


class BindingSpec(Strict):
    exchange: Name
    key: str = ""
    """Routing key; for topic exchanges a pattern of dot-separated words with * and #."""


class VisibilitySpec(Strict):
    """SQS-style visibility timeout (docs/models.md §4), emulated client-side on both brokers."""

    timeout: PosDuration
    max_deliveries: int = Field(5, ge=1, le=1000)
    in_order: bool = False
    """In-order (SQS FIFO-like) delivery: one delivery of the queue in flight at a time, and a
    failed one holds the head of the line until its timeout runs out, then goes first. Live:
    one active consumer (RabbitMQ x-single-active-consumer, ActiveMQ exclusive consumer; the
    others stand by) with prefetch 1. Slower once deliveries fail; the ledger's
    order_violations stays 0."""
    dead_letter_queue: Name | None = None
    """Where messages go after max_deliveries; default '<queue>.dlq'."""


class QueueSpec(Strict):
    name: Name
    durable: bool = True
    type: Literal["classic", "quorum"] = "classic"
    bindings: list[BindingSpec] = Field(default_factory=list)
    max_length: int | None = Field(None, ge=1)
    visibility: VisibilitySpec | None = None
    exclusive: bool = False
    """A transient subscription (docs/models.md §6): the queue is declared (and bound) by its
    one consumer's own connection, usable only by it and deleted when that connection closes;
    the consumer declares it again when it reconnects. Publishes meanwhile find no queue.
    Needs `durable: false` and a consumer group of `count: 1`. ActiveMQ: a non-durable topic
    subscription."""
    auto_delete: bool = False
    """A transient subscription shared by its consumer group: declared by each consumer's own
    connection, deleted when the last one goes away (and declared again on reconnect).
    Needs `durable: false`. ActiveMQ: a non-durable topic subscription per consumer."""

    @property
    def transient(self) -> bool:
        """Exists only while a consumer is connected (`exclusive` or `auto_delete`)."""
        return self.exclusive or self.auto_delete


class LoadBalancedSpec(Strict):
    """Elastic load-balanced queues behind one alias (docs/models.md §7)."""

    alias: Name
    queues: int = Field(1, ge=1, le=100)
    max_queues: int = Field(10, ge=1, le=100)
    durable: bool = True

    def member(self, i: int) -> str:
        return f"{self.alias}.{i}"


class TopologySpec(Strict):
    exchanges: list[ExchangeSpec] = Field(default_factory=list)
    queues: list[QueueSpec] = Field(default_factory=list)
    load_balanced: list[LoadBalancedSpec] = Field(default_factory=list)


# --- producers and consumers ----------------------------------------------------------------


class ProducerSpec(Strict):
    name: Name
    count: int = Field(1, ge=0, le=10_000)
    queue: Name | None = None
    exchange: Name | None = None
    routing_key: str | list[str] | None = None
    """A key, or a list chosen uniformly per message (topic routing)."""
    arrival: Annotated[Arrival, BeforeValidator(_rate_shorthand)]
    size: SizeDistribution = Field(default_factory=lambda: Deterministic(kind="fixed", value=200.0))
    persistent: bool = False
    confirms: bool = False
    mandatory: bool = False
    """Ask the broker to return a publish that no queue takes (AMQP ``mandatory``, RabbitMQ
    only), e.g. one sent while a transient subscription's consumer is away: the ledger counts
    it `unroutable`, apart from `lost`. Without it such publishes vanish unreported."""
    message_type: Name | None = None
    """Type label for per-type latency tables; defaults to the producer's name."""
    start: NonNegDuration = 0.0
    stop: NonNegDuration | None = None
    max_messages: int | None = Field(None, ge=1)

    @property
    def type_label(self) -> str:
        return self.message_type or self.name

    @property
    def destination(self) -> str:
        return self.queue or self.exchange or ""


class FollowUpSpec(Strict):
    """A message-driven chain link: on consuming a message (of type `on`), publish another."""

    on: Name | None = None
    message_type: Name
    queue: Name | None = None
    exchange: Name | None = None
    routing_key: str | None = None
    size: SizeDistribution = Field(default_factory=lambda: Deterministic(kind="fixed", value=200.0))
    probability: float = Field(1.0, ge=0.0, le=1.0)
    persistent: bool = False

    @property
    def destination(self) -> str:
        return self.queue or self.exchange or ""


class ConsumerSpec(Strict):
    name: Name
    queue: Name
    count: int = Field(1, ge=0, le=10_000)
    prefetch: int = 10
    """Max unacknowledged deliveries per consumer; 0 means unlimited (RabbitMQ semantics)."""
    ack: Literal["auto", "after_receive", "after_processing"] = "after_processing"
    service_time: TimeDistribution = Field(default_factory=lambda: Deterministic(value=0.0))
    failure_probability: float = Field(0.0, ge=0.0, lt=1.0)
    """Probability a delivery is dropped without ack (redelivered after VT or reconnect)."""
    follow_ups: list[FollowUpSpec] = Field(default_factory=list)
    start: NonNegDuration = 0.0


class AccuracyTargets(Strict):
    """Relative-error targets for the report verdicts (docs/models.md §10, issue targets)."""

    throughput: float = Field(0.05, gt=0)
    latency_mean: float = Field(0.15, gt=0)
    latency_p50: float = Field(0.15, gt=0)
    latency_p95: float = Field(0.25, gt=0)
    latency_p99: float = Field(0.35, gt=0)
    queue_depth_pearson_r: float = Field(0.9, ge=-1, le=1)
    """Across-window Pearson r of queue depth, judged in overload scenarios (``overload: true``):
    there the depth follows a trend the model must reproduce."""
    queue_depth_mean: float = Field(0.25, gt=0)
    """Relative error of the mean queue depth, judged in stable scenarios: there the per-window
    depth is noise around its mean, uncorrelated between two independent runs (r ≈ 0)."""
    latency_ks: float = Field(0.10, gt=0, le=1)
    """Largest Kolmogorov–Smirnov distance between the measured and predicted latency CDFs."""
    latency_w1: float = Field(0.15, gt=0)
    """Largest Wasserstein-1 distance between the latency distributions, as a fraction of the
    measured mean latency (W1 is the mean absolute shift between the two quantile functions)."""


def _queue_threshold(value: Any) -> Any:
    """Unquoted ``- work: p99 < 100ms`` is a one-key mapping in YAML: the per-queue form."""
    if isinstance(value, dict) and len(value) == 1:
        ((queue, text),) = value.items()
        if isinstance(queue, str) and isinstance(text, str):
            return f"{queue}: {text}"
    return value


def _threshold(text: str) -> str:
    parse_threshold(text)  # a ValueError names the text and what is wrong with it
    return text


ThresholdText = Annotated[str, BeforeValidator(_queue_threshold), AfterValidator(_threshold)]
"""A threshold string, k6-style: ``p95 < 50ms`` (see :mod:`testbed.core.thresholds`)."""


class RecordingSpec(Strict):
    batch_rows: int = Field(5_000, ge=1, le=1_000_000)
    """Rows a worker buffers per table before flushing to Parquet."""
    flush_interval: PosDuration = 1.0
    """Longest a recorded row stays buffered before it is flushed: a crashed (SIGKILLed) worker
    loses at most this many seconds of rows per table (and never more than `batch_rows`)."""
    poll_interval: PosDuration = 1.0
    window: PosDuration = 1.0


class Scenario(Strict):
    name: Name
    description: str = ""
    seed: int = Field(1, ge=0, le=2**63 - 1)
    duration: PosDuration
    warmup: NonNegDuration = 0.0
    drain_timeout: NonNegDuration = 30.0
    replications: int = Field(1, ge=1, le=1000)
    workers: int = Field(1, ge=1, le=64)
    """Locust worker processes (a master is added when > 1)."""
    overload: bool = False
    """Set when the configuration is meant to be unstable (utilisation ≥ 1)."""
    broker: BrokerSpec = Field(default_factory=BrokerSpec)
    topology: TopologySpec = Field(default_factory=TopologySpec)
    producers: list[ProducerSpec] = Field(min_length=1)
    consumers: list[ConsumerSpec] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    autoscaling: list[Autoscaling] = Field(default_factory=list)
    accuracy: AccuracyTargets = Field(default_factory=AccuracyTargets)
    recording: RecordingSpec = Field(default_factory=RecordingSpec)
    thresholds: list[ThresholdText] = Field(default_factory=list, max_length=100)
    """SLOs judged on the measured run, k6-style: ``p95 < 50ms``, ``lost == 0``,
    ``throughput >= 180/s``, ``work: p99 < 100ms`` (one queue). ``mqbed run`` exits 6 when one
    misses. Unlike ``accuracy`` they judge the system, not the prediction; metrics and units:
    README "Thresholds"."""

    # -- lookups used by the checks, the workload and the simulator --

    def queue(self, name: str) -> QueueSpec | None:
        return next((q for q in self.topology.queues if q.name == name), None)

    def exchange(self, name: str) -> ExchangeSpec | None:
        return next((x for x in self.topology.exchanges if x.name == name), None)

    def queue_names(self) -> list[str]:
        names = [q.name for q in self.topology.queues]
        for lb in self.topology.load_balanced:
            names.append(lb.alias)
            names.extend(lb.member(i) for i in range(lb.max_queues))
        return names

    def consumer_group(self, name: str) -> ConsumerSpec | None:
        return next((c for c in self.consumers if c.name == name), None)

    def producer_group(self, name: str) -> ProducerSpec | None:
        return next((p for p in self.producers if p.name == name), None)

    def routed_queues(self, exchange: str, routing_key: str | None) -> list[str]:
        """Queues a message published to `exchange` with `routing_key` reaches."""
        from testbed.core.routing import topic_matches

        x = self.exchange(exchange)
        if x is None:
            return []
        out: list[str] = []
        for q in self.topology.queues:
            for b in q.bindings:
                if b.exchange != exchange:
                    continue
                if (
                    x.type == "fanout"
                    or (x.type == "direct" and b.key == (routing_key or ""))
                    or (x.type == "topic" and topic_matches(b.key, routing_key or ""))
                ):
                    out.append(q.name)
                    break
        return out

    def resolved_yaml(self) -> str:
        """The scenario with every default filled, as written to the run directory."""
        import yaml

        from testbed.core.scenario_units import RESOLVED_HEADER

        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        return RESOLVED_HEADER + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


__all__ += ["Fault", "Autoscaling"]
