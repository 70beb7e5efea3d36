"""The broker kinds mqbed knows, and per kind the facts the rest of the code branches on.

Scenarios, profiles and run files name a broker by its kind string (``rabbitmq``,
``activemq``); everything outside the broker adapters (`testbed.brokers`) and the backends
(`testbed.backends`) asks this registry what a kind can do instead of comparing that string.
Adding a broker is one adapter package, its backend drivers and one `register` call below (with
its name in `KindName`); docs/architecture.md "Recipes" has the list.

The registry lives in `testbed.core` because scenario checks and the simulator need it, and
``core`` imports nothing else of mqbed. Live-side pieces (adapter classes, the statistics
poller, the local version probe) are therefore named as ``"module:attribute"`` strings that the
live side imports when it needs them, as `testbed.brokers.adapter_class` always did.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_KIND",
    "KINDS",
    "KindFacts",
    "KindName",
    "ClientName",
    "client_mismatch",
    "facts",
    "kind_list",
    "load",
    "register",
]

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from testbed.exceptions import ConfigurationError

KindName = Literal["rabbitmq", "activemq"]
"""The registered kinds as a type: the scenario schema's ``broker.kind``, profiles and command
line choices use it. Extend it with a registration (tests/unit/test_broker_kinds.py checks that
it names exactly the registered kinds)."""
ClientName = Literal["pika", "kombu", "stomp"]
"""Every registered kind's client libraries as a type (``broker.client``, profiles, command
line choices); tests/unit/test_broker_kinds.py checks it against the registrations."""


@dataclass(frozen=True)
class KindFacts:
    """What one broker kind is and does, as far as code outside its adapter cares."""

    name: str
    """The kind string of scenarios and files (``broker.kind``)."""
    title: str
    """The broker's name in messages and documents."""
    protocol: str
    """The wire protocol its client libraries speak (messages)."""
    clients: Mapping[str, str]
    """Client library -> its adapter ``"module:Class"``; the first one is the default."""
    model: Literal["amqp", "threads", "shared_lock"]
    """The emulator's default service model (``broker.model``, docs/models.md §3)."""
    url_scheme: str
    """Scheme of the broker's URLs (external backend, ``mqbed up``)."""
    no_alarms: str | None
    """Why memory and disk alarms cannot be raised and cleared on a running node (fault
    injection), or None when they can (see `alarms`; the fault runs ``rabbitmqctl``,
    `testbed.faults.injector`)."""
    visibility: Literal["delay_queue", "in_process"]
    """How a visibility timeout runs: ``delay_queue`` - a broker-side delay queue whose
    messages expire back into the queue; ``in_process`` - the consumer holds the message in its
    own process until the timeout (`testbed.control.visibility`)."""
    quorum_queues: bool
    """Queues may have ``type: quorum``."""
    reserved_prefix: str | None
    """Queue and exchange names with this prefix are the broker's own (declaring is refused)."""
    restart_s: float
    """Start-up time after a kill or restart (`testbed.core.availability.RESTART_S`)."""
    ack_loss_s: float
    """Consumers' acks of persistent messages a kill forgets (s), when the profile has no
    measured figure (`testbed.core.availability.ack_loss_seconds`)."""
    acks_with_writes: bool
    """Acks of persistent messages reach the disk with the broker's next persistent write, so
    a kill forgets every ack since the last one (`emulator.sim.ack_journal`); False: a kill
    forgets those of the last ``ack_loss_s`` seconds."""
    wake_overlaps_routing: bool
    """The wake-up of a fanned-out message published after idle time overlaps the broker's
    routing of it to its extra queues: its copies take the wake-up less that routing
    (`emulator.sim.wake`); False: the one after the other."""
    follow_ups_together: bool
    """A handler's follow-ups reach their consumers only after the last of them is sent (on
    SPECjms2007 interaction 1, 2026-11-29, the first of three started 0.75-0.83 ms after the
    last stamp on ActiveMQ, where a single follow-up takes 0.65-0.71 ms); False: each is on its
    way from its own stamp (RabbitMQ: the first started 0.34 ms after the last stamp, a single
    follow-up taking 0.77-0.88 ms; a second run started it 0.80 ms after: thin evidence,
    docs/models.md §9). `emulator.sim.consumers`."""
    kill_s: float
    """How long a kill takes until the process is gone and its sockets close, when the
    profile has no measured figure (`testbed.core.availability.kill_teardown_seconds`)."""
    prometheus_plugin: bool
    """The broker serves its own Prometheus metrics (``BrokerEndpoint.prometheus_url``)."""
    management_api: bool
    """The broker answers RabbitMQ's HTTP management API (``BrokerEndpoint.management_url``,
    ``/api/overview``: its version)."""
    stats_poller: str
    """``"module:Class"`` of its `testbed.observe.stats.StatsPoller`."""
    stats_refresh_s: float
    """Seconds between the statistics updates a controller's poll can read; a simulated
    controller reads the update before the last (`emulator.sim.autoscale.StatsFeed`). 0: the
    broker answers from live counters."""
    local_version: str | None
    """``"module:function"`` returning the locally installed broker's version (or None), for
    when neither the backend nor a management API says."""
    deletes_topology: bool
    """Its adapter can delete queues and exchanges (calibration cleans up after itself)."""
    calibration_queue_per_consumer: bool
    """Calibration consumes each queue of a fan-out stream on a connection and thread of its
    own, rather than all of a stream's queues on one."""
    transient_queues: Literal["queue", "topic"]
    """What a transient subscription (a queue with ``exclusive``/``auto_delete``,
    docs/models.md §6) is on this broker: ``queue`` - a queue its consumer's own connection
    declares and binds, deleted with that connection and declared again on reconnect;
    ``topic`` - a non-durable topic subscription (producers send to the topic, which keeps
    nothing for an absent subscriber)."""
    no_mandatory: str | None
    """Why a producer cannot ask for unroutable publishes back (``mandatory``), or None when
    it can."""
    warm_up: int
    """Messages a backend sends a broker it has just started through a scratch queue before it
    reports it ready (`testbed.backends.warm_up`): a JVM broker runs its message path
    interpreted until the JIT compiler has seen it often enough (0: none needed)."""
    high_watermark: float
    """Calibration default: the profile's ``high_watermark`` (fraction of the memory limit
    where producers block); not measured (`testbed.calibration.assemble.HIGH_WATERMARK`)."""

    @property
    def default_client(self) -> str:
        return next(iter(self.clients))

    @property
    def alarms(self) -> bool:
        """Memory and disk alarms can be raised and cleared on a running node."""
        return self.no_alarms is None

    @property
    def mandatory(self) -> bool:
        """Producers may publish with ``mandatory`` and hear of unroutable messages."""
        return self.no_mandatory is None


_KINDS: dict[str, KindFacts] = {}
KINDS: Mapping[str, KindFacts] = MappingProxyType(_KINDS)
"""Every registered kind by name, in registration order."""


def register(kind: KindFacts) -> KindFacts:
    """Add a broker kind to the registry (once)."""
    if kind.name in _KINDS:
        raise ValueError(f"broker kind {kind.name!r} is registered already")
    if not kind.clients:
        raise ValueError(f"broker kind {kind.name!r}: no client library")
    _KINDS[kind.name] = kind
    return kind


def kind_list(quote: bool = False) -> str:
    """The registered kinds for a message: ``rabbitmq or activemq`` (quoted: ``'rabbitmq'``)."""
    return " or ".join(repr(k) if quote else k for k in KINDS)


def load(ref: str) -> Any:
    """The object a ``"module:attribute"`` string of the registry names (imported now)."""
    module, attr = ref.split(":")
    return getattr(importlib.import_module(module), attr)


def facts(kind: str) -> KindFacts:
    """The facts of broker `kind`; a `ConfigurationError` naming the known kinds if unknown."""
    found = KINDS.get(kind)
    if found is None:
        raise ConfigurationError(f"broker kind {kind!r}: unknown (expected {kind_list(True)})")
    return found


def client_mismatch(kind: str, client: str) -> str | None:
    """Why `client` cannot talk to a `kind` broker, or None when it can (or `kind` is unknown:
    the schema reports that)."""
    own = KINDS.get(kind)
    if own is None or client in own.clients:
        return None
    alternatives = " or ".join(repr(c) for c in own.clients)
    owner = next((k for k in KINDS.values() if client in k.clients), None)
    speaks = f"talks to {owner.title} ({owner.protocol})" if owner else "is unknown"
    return f"client {client!r} {speaks}; {own.title} uses {alternatives}"


RABBITMQ = register(
    KindFacts(
        name="rabbitmq",
        title="RabbitMQ",
        protocol="AMQP 0-9-1",
        clients=MappingProxyType(
            {
                "pika": "testbed.brokers.rabbitmq:RabbitMQAdapter",
                "kombu": "testbed.brokers.kombu_rabbitmq:KombuRabbitMQAdapter",
            }
        ),
        model="amqp",
        url_scheme="amqp",
        no_alarms=None,
        visibility="delay_queue",
        quorum_queues=True,
        reserved_prefix="amq.",
        restart_s=6.0,  # ~5-8 s with persistent data
        # 1 ack forgotten on each of four calibration kills at 100 msg/s (2026-11-27); those
        # sent while the process dies are the teardown's (kill_s)
        ack_loss_s=0.01,
        # the acks a kill forgot were those after the last publish before it, up to 24 ms
        # before the signal (15 PCM kills, 2026-11-28, tests/bench/ack_loss_rule.py)
        acks_with_writes=True,
        # SPECjms2007 interaction 3 (five queues a message, 2026-11-29): first copies published
        # after idle time 0.375 ms slower than awake ones, where the calibration's one-queue
        # wake-up was 0.16-0.35 ms and the fan delay of four extra queues 0.13 ms: they add up
        # (re-predicted with the run's own profile, KS 0.076 adding them, 0.183 overlapping)
        wake_overlaps_routing=False,
        follow_ups_together=False,
        # publishes lost in flight per kill at 100 msg/s: 1.9 over 9 live PCM kills (2-3, 1-3,
        # 1-2 in three sessions, 2026-11-27); signal -> process gone took 28 ms
        kill_s=0.019,
        prometheus_plugin=True,
        management_api=True,
        stats_poller="testbed.observe.stats:RabbitMQStatsPoller",
        # collect_statistics_interval (deploy/rabbitmq/rabbitmq.conf.tmpl), passed twice: the
        # live controller of the elastic ramp read the backlog of 0.84-1.10 s before each poll
        # (median 0.95 s, three replications, 2026-11-28)
        stats_refresh_s=1.0,
        local_version=None,
        deletes_topology=True,
        calibration_queue_per_consumer=False,
        transient_queues="queue",
        no_mandatory=None,
        warm_up=0,  # Erlang code is compiled when loaded: a fresh node is as fast at once
        # RabbitMQ's watermark applies to the whole node's memory, base included, so no
        # constant fraction of the limit is right for every limit: 0.6 is a placeholder
        high_watermark=0.6,
    )
)

ACTIVEMQ = register(
    KindFacts(
        name="activemq",
        title="ActiveMQ",
        protocol="STOMP",
        clients=MappingProxyType({"stomp": "testbed.brokers.activemq:ActiveMQAdapter"}),
        model="threads",
        url_scheme="stomp",
        no_alarms="ActiveMQ 5.17 reads its memory/store limits at start-up only",
        visibility="in_process",
        quorum_queues=False,
        reserved_prefix=None,
        restart_s=1.5,  # ~1-2 s
        # 0 and 1 acks forgotten on two calibration kills under the run-shaped load (4 ms per
        # message, 100 msg/s; 2026-11-27); the live PCM kills counted 2, 1 and 0 duplicates
        ack_loss_s=0.005,
        acks_with_writes=False,  # its PCM kills forgot only acks sent after the signal
        # SPECjms2007 interaction 3 (2026-11-28 and -29): first copies after idle time
        # 0.19-0.21 ms slower than awake ones, against a one-queue wake-up of 0.38-0.44 ms and
        # a fan delay of 0.28 ms (re-predicted with the runs' own profiles, KS 0.059 and 0.168
        # overlapping them, 0.261 and 0.406 adding them)
        wake_overlaps_routing=True,
        follow_ups_together=True,
        # publishes lost in flight per kill at 100 msg/s: 3.6 over 9 live PCM kills (2-7 each,
        # 2026-11-27); signal -> process gone took 24 ms
        kill_s=0.036,
        prometheus_plugin=False,
        management_api=False,
        stats_poller="testbed.observe.stats:ActiveMQStatsPoller",
        # its statistics plugin answers from live counters: the same ramp read the backlog of
        # 0.02-0.15 s before each poll (2026-11-28)
        stats_refresh_s=0.0,
        local_version="testbed.backends.local_activemq:activemq_version",
        deletes_topology=False,  # queues cannot be deleted over STOMP
        calibration_queue_per_consumer=True,
        transient_queues="topic",
        no_mandatory="ActiveMQ drops a message sent to a topic nobody subscribes to without "
        "telling the producer (STOMP has no basic.return)",
        # a fresh JVM delivered the calibration's light streams in 1.1-1.6 ms for its first
        # ~2,000 messages, a warm one in 0.5-0.6 ms; 30,000 warm-up messages (~8 s) brought a
        # fresh broker within run-to-run noise of a warm one, 10,000 half-way (2026-11-27)
        warm_up=30_000,
        # blocks producers when its message memory (what the poller reports) reaches the limit
        high_watermark=1.0,
    )
)

DEFAULT_KIND: KindName = "rabbitmq"
"""The kind of a scenario that names none (``broker.kind``'s default)."""
