"""Cross-field checks of transient subscriptions (queues with ``exclusive``/``auto_delete``)
and ``mandatory`` publishes (docs/models.md §6, best effort), called by
:func:`testbed.core.scenario_checks.check_scenario` with its issue collector.

A transient queue exists only while its consumer is connected: the consumer's own connection
declares (and binds) it and it goes away with that connection. What follows from that, and
what a broker cannot do, is refused here, at load, rather than at minute 12 of a run.
"""

from __future__ import annotations

__all__ = ["check_transient", "transient_queue_names"]

from typing import TYPE_CHECKING, Any

from testbed.core.broker_kinds import KINDS

if TYPE_CHECKING:
    from testbed.core.scenario import QueueSpec, Scenario

Path_ = tuple[str | int, ...]


def transient_queue_names(s: Scenario) -> set[str]:
    """Names of the scenario's transient queues (``exclusive`` or ``auto_delete``)."""
    return {q.name for q in s.topology.queues if q.transient}


def _field(q: QueueSpec) -> str:
    return "exclusive" if q.exclusive else "auto_delete"


def check_transient(c: Any, s: Scenario) -> None:
    """Errors go to `c` (``c.error(path, message)``)."""
    facts = KINDS[s.broker.kind]
    for qi, q in enumerate(s.topology.queues):
        if q.transient:
            _check_queue(c, s, q, ("topology", "queues", qi))
    if not facts.mandatory:
        for pi, p in enumerate(s.producers):
            if p.mandatory:
                c.error(
                    ("producers", pi, "mandatory"),
                    f"mandatory: true is not possible on {facts.title}: {facts.no_mandatory}; "
                    f"remove it (what a transient subscription misses then counts as lost)",
                )


def _check_queue(c: Any, s: Scenario, q: QueueSpec, qp: Path_) -> None:
    facts = KINDS[s.broker.kind]
    name = _field(q)
    if q.type == "quorum":
        c.error(qp + (name,), "RabbitMQ refuses an exclusive or auto_delete quorum queue")
    if q.durable:
        c.error(
            qp + ("durable",),
            f"queue {q.name!r} is {name} (deleted with its consumer's connection), so it cannot "
            f"be durable: set durable: false",
        )
    if q.visibility is not None:
        c.error(
            qp + ("visibility",),
            f"queue {q.name!r} is {name}: a visibility timeout re-enqueues copies into a queue "
            f"that may not exist; it is not supported on a transient queue",
        )
    groups = [(i, g) for i, g in enumerate(s.consumers) if g.queue == q.name]
    if len(groups) != 1:
        c.error(
            qp + (name,),
            f"queue {q.name!r} is {name}: exactly one consumer group must read it (its "
            f"consumers declare it), found {len(groups)}",
        )
    for i, g in groups:
        if q.exclusive and g.count != 1:
            c.error(
                ("consumers", i, "count"),
                f"queue {q.name!r} is exclusive: only the connection that declares it may "
                f"consume it, so its group needs count: 1, got {g.count}",
            )
        if any(a.target == g.name for a in s.autoscaling):
            c.error(
                ("consumers", i, "queue"),
                f"group {g.name!r} reads the {name} queue {q.name!r}, which is not supported "
                f"with autoscaling",
            )
    for oi, other in enumerate(s.topology.queues):
        if other.visibility is not None and other.visibility.dead_letter_queue == q.name:
            c.error(
                ("topology", "queues", oi, "visibility", "dead_letter_queue"),
                f"queue {q.name!r} is {name}; it cannot be a dead-letter queue",
            )
    if facts.transient_queues == "topic":
        _check_topic(c, s, q, qp)


def _check_topic(c: Any, s: Scenario, q: QueueSpec, qp: Path_) -> None:
    """On a broker where a transient queue is a non-durable topic subscription (ActiveMQ):
    producers and follow-ups may name the queue, or it may follow one fanout exchange — one
    subscription cannot take both, and direct/topic routing has no topic to subscribe to."""
    facts = KINDS[s.broker.kind]
    direct = any(p.queue == q.name for p in s.producers) or any(
        f.queue == q.name for g in s.consumers for f in g.follow_ups
    )
    for bi, b in enumerate(q.bindings):
        x = s.exchange(b.exchange)
        if x is not None and x.type != "fanout":
            c.error(
                qp + ("bindings", bi, "exchange"),
                f"on {facts.title} a transient queue is a non-durable topic subscription; it "
                f"can follow a fanout exchange, not the {x.type} exchange {x.name!r}",
            )
        elif direct:
            c.error(
                qp + ("bindings", bi, "exchange"),
                f"on {facts.title} a transient queue is one topic subscription: it takes the "
                f"messages sent to {q.name!r} or those of the fanout exchange "
                f"{b.exchange!r}, not both",
            )
    if q.max_length is not None:
        c.error(
            qp + ("max_length",),
            f"on {facts.title} a transient queue is a topic subscription, which has no max_length",
        )
