"""Cross-field checks on a schema-valid scenario: references resolve, times fit the run,
the configuration is stable unless marked as an overload experiment.

Run once at load so that a 30-minute run never dies at minute 12 on a typo.
"""

from __future__ import annotations

__all__ = ["check_scenario"]

import os
from pathlib import Path
from typing import Any

from testbed.core.broker_kinds import KINDS, client_mismatch
from testbed.core.routing import valid_topic_pattern
from testbed.core.scenario import (
    ClosedArrival,
    Scenario,
    TraceArrival,
)
from testbed.core.scenario_autoscaling import check_autoscaling
from testbed.core.scenario_bounds import check_bounds
from testbed.core.scenario_faults import (
    BrokerFault,
    ClientFault,
    NetworkFault,
    StochasticFault,
)
from testbed.core.scenario_stability import check_stability
from testbed.core.scenario_transient import check_transient
from testbed.core.suggest import did_you_mean
from testbed.core.trace_file import TraceError, read_trace
from testbed.core.yamlmap import LineMap, format_path
from testbed.exceptions import ScenarioIssue

ENV_BROKER_URLS = "MQBED_BROKER_URLS"  # = testbed.backends.external.ENV_URLS (core: no imports)

Path_ = tuple[str | int, ...]


class _Collector:
    def __init__(self, lines: LineMap, file: str):
        self.lines = lines
        self.file = file
        self.issues: list[ScenarioIssue] = []

    def error(self, path: Path_, msg: str) -> None:
        self.issues.append(ScenarioIssue(self.file, self.lines.line(path), format_path(path), msg))

    def warn(self, path: Path_, msg: str) -> None:
        self.issues.append(
            ScenarioIssue(self.file, self.lines.line(path), format_path(path), msg, "warning")
        )


def _unique(c: _Collector, items: list[Any], section: Path_, what: str) -> None:
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        name = item.name
        if name in seen:
            c.error(
                section + (i, "name"),
                f"duplicate {what} name {name!r} (also at index {seen[name]})",
            )
        seen.setdefault(name, i)


def _check_destination(
    c: _Collector,
    s: Scenario,
    path: Path_,
    queue: str | None,
    exchange: str | None,
    routing_key: Any,
) -> None:
    queues = s.queue_names()
    exchanges = [x.name for x in s.topology.exchanges]
    if (queue is None) == (exchange is None):
        c.error(path, "give exactly one of 'queue' or 'exchange' as the destination")
        return
    if queue is not None:
        if queue not in queues:
            c.error(
                path + ("queue",),
                f"queue {queue!r} is not declared in topology.queues{did_you_mean(queue, queues)}",
            )
        if routing_key is not None:
            c.error(path + ("routing_key",), "routing_key applies only with an exchange")
    if exchange is not None:
        x = s.exchange(exchange)
        if x is None:
            c.error(
                path + ("exchange",),
                f"exchange {exchange!r} is not declared in "
                f"topology.exchanges{did_you_mean(exchange, exchanges)}",
            )
        elif x.type == "topic":
            keys = routing_key if isinstance(routing_key, list) else [routing_key or ""]
            for k in keys:
                if "*" in k or "#" in k:
                    c.error(
                        path + ("routing_key",),
                        f"routing key {k!r} contains a wildcard; "
                        "wildcards belong in bindings, not in published keys",
                    )


def check_scenario(
    s: Scenario, data: dict[str, Any], lines: LineMap, file: str, base_dir: Path
) -> list[ScenarioIssue]:
    c = _Collector(lines, file)
    topo = s.topology
    _unique(c, topo.queues, ("topology", "queues"), "queue")
    _unique(c, topo.exchanges, ("topology", "exchanges"), "exchange")
    _unique(c, s.producers, ("producers",), "producer")
    _unique(c, s.consumers, ("consumers",), "consumer")
    _check_run_and_broker(c, s)
    _check_queues(c, s)
    _check_producers(c, s, base_dir)
    _check_consumers(c, s)
    _check_faults(c, s)
    check_autoscaling(c, s)
    check_transient(c, s)
    check_bounds(c, s)
    check_stability(c, s, data)
    _check_thresholds(c, s)
    return c.issues


def _check_thresholds(c: _Collector, s: Scenario) -> None:
    """A per-queue threshold names a queue of the run."""
    from testbed.core.thresholds import parse_threshold

    names = s.queue_names()
    for i, text in enumerate(s.thresholds):
        queue = parse_threshold(text).queue
        if queue is not None and queue not in names:
            c.error(
                ("thresholds", i),
                f"{text!r}: no queue {queue!r}{did_you_mean(queue, names)}",
            )


def _check_run_and_broker(c: _Collector, s: Scenario) -> None:
    """Warm-up inside the run; the client speaks the broker's protocol; external has URLs."""
    if s.warmup >= s.duration:
        c.error(("warmup",), f"warmup {s.warmup:g}s must be shorter than duration {s.duration:g}s")

    if s.broker.client is not None and (why := client_mismatch(s.broker.kind, s.broker.client)):
        c.error(("broker", "client"), why)
    if s.broker.backend == "external" and not (s.broker.urls or os.environ.get(ENV_BROKER_URLS)):
        c.error(("broker", "urls"), f"backend 'external' needs broker.urls (or ${ENV_BROKER_URLS})")


def _check_queues(c: _Collector, s: Scenario) -> None:
    """Quorum queues on RabbitMQ and durable; bindings to declared exchanges, valid topic
    patterns; no queue dead-letters to itself."""
    topo = s.topology
    quorum = KINDS[s.broker.kind].quorum_queues
    exchanges = [x.name for x in topo.exchanges]
    for qi, q in enumerate(topo.queues):
        qp: Path_ = ("topology", "queues", qi)
        if q.type == "quorum":
            if not quorum:
                where = " and ".join(k.title for k in KINDS.values() if k.quorum_queues)
                c.error(qp + ("type",), f"quorum queues exist only on {where}")
            if not q.durable:
                c.error(qp + ("durable",), "a quorum queue must be durable")
        for bi, b in enumerate(q.bindings):
            bp = qp + ("bindings", bi)
            x = s.exchange(b.exchange)
            if x is None:
                c.error(
                    bp + ("exchange",),
                    f"exchange {b.exchange!r} is not declared{did_you_mean(b.exchange, exchanges)}",
                )
            elif x.type == "topic" and (why := valid_topic_pattern(b.key)):
                c.error(bp + ("key",), why)
        if q.visibility and q.visibility.dead_letter_queue == q.name:
            c.error(
                qp + ("visibility", "dead_letter_queue"), "a queue cannot dead-letter to itself"
            )


def _check_producers(c: _Collector, s: Scenario, base_dir: Path) -> None:
    """Destinations resolve, start/stop fit the run; reads each trace arrival's file."""
    for pi, p in enumerate(s.producers):
        pp: Path_ = ("producers", pi)
        _check_destination(c, s, pp, p.queue, p.exchange, p.routing_key)
        if p.start >= s.duration:
            c.error(
                pp + ("start",),
                f"start {p.start:g}s is at or after the end of the run ({s.duration:g}s)",
            )
        if p.stop is not None and p.stop <= p.start:
            c.error(pp + ("stop",), f"stop {p.stop:g}s must be after start {p.start:g}s")
        arr = p.arrival
        if isinstance(arr, ClosedArrival) and not p.confirms and s.broker.model != "shared_lock":
            # (shared_lock: a writer holds the broker's lock for its write, so a closed producer
            # blocks on the write itself — docs/models.md §3b — and the warning would mislead)
            c.warn(
                pp + ("confirms",),
                "a closed-loop producer without confirms blocks only until "
                "the socket write; set confirms: true to block until the broker has the message",
            )
        if isinstance(arr, TraceArrival):
            _load_trace(c, arr, pp + ("arrival", "file"), base_dir)


def _check_consumers(c: _Collector, s: Scenario) -> None:
    """Consumers read declared queues; prefetch; follow-up destinations resolve."""
    for ci, cg in enumerate(s.consumers):
        cp: Path_ = ("consumers", ci)
        if cg.queue not in s.queue_names():
            c.error(
                cp + ("queue",),
                f"consumer reads queue {cg.queue!r}, which nobody declares"
                f"{did_you_mean(cg.queue, s.queue_names())}",
            )
        if cg.prefetch < 0:
            c.error(cp + ("prefetch",), f"prefetch must be >= 0 (0 = unlimited), got {cg.prefetch}")
        if cg.ack == "auto" and cg.failure_probability > 0:
            c.warn(
                cp + ("failure_probability",),
                "with ack 'auto' a dropped message is lost, "
                "not redelivered (the best-effort setting)",
            )
        for fi, f in enumerate(cg.follow_ups):
            _check_destination(c, s, cp + ("follow_ups", fi), f.queue, f.exchange, f.routing_key)


def _check_faults(c: _Collector, s: Scenario) -> None:
    """Each fault lies inside the run and names a broker node or client group that exists."""
    consumer_names = [g.name for g in s.consumers]
    producer_names = [p.name for p in s.producers]
    nodes = ["broker"] + [f"broker{i}" for i in range(s.broker.nodes)]
    for fi, fault in enumerate(s.faults):
        fp: Path_ = ("faults", fi)
        if fault.at >= s.duration:
            c.error(
                fp + ("at",),
                f"fault at {fault.at:g}s is after the end of the run (duration {s.duration:g}s)",
            )
        dur = getattr(fault, "duration", 0.0) or 0.0
        if fault.at < s.duration and fault.at + dur > s.duration + s.drain_timeout:
            c.warn(
                fp + ("duration",),
                f"fault runs until {fault.at + dur:g}s, past the end of "
                f"the run and drain ({s.duration + s.drain_timeout:g}s); it is healed at the end",
            )
        if isinstance(fault, BrokerFault) and fault.target not in nodes:
            c.error(
                fp + ("target",),
                f"unknown broker node {fault.target!r}"
                f"{did_you_mean(fault.target, nodes)}; nodes are {', '.join(nodes)}",
            )
        if isinstance(fault, ClientFault):
            names = consumer_names if fault.kind == "consumer_crash" else producer_names
            if fault.target not in names:
                c.error(
                    fp + ("target",),
                    f"unknown {fault.kind.split('_')[0]} group "
                    f"{fault.target!r}{did_you_mean(fault.target, names)}",
                )
        if isinstance(fault, StochasticFault):
            names = ["broker", *consumer_names]
            if fault.target not in names:
                c.error(
                    fp + ("target",),
                    f"unknown target {fault.target!r}{did_you_mean(fault.target, names)}",
                )
            if fault.until is not None and fault.until <= fault.at:
                c.error(fp + ("until",), f"until {fault.until:g}s must be after at {fault.at:g}s")
        if (
            isinstance(fault, NetworkFault)
            and fault.kind == "latency"
            and ((fault.jitter or 0) > (fault.latency or 0))
        ):
            c.warn(fp + ("jitter",), "jitter larger than latency is clipped at zero delay")


def _load_trace(c: _Collector, arr: TraceArrival, path: Path_, base_dir: Path) -> None:
    try:
        arr.times[:] = read_trace(arr.file, base_dir)
    except TraceError as e:
        c.error(path, str(e))
