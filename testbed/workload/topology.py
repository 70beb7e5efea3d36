"""Scenario topology -> broker declarations (exchanges, queues, bindings, dead-letter queues)."""

from __future__ import annotations

__all__ = [
    "declarations",
    "subscription_declarations",
    "all_queue_names",
    "purgeable_queue_names",
    "purge",
]

import time

from testbed.brokers.base import BindingDecl, BrokerAdapter, Declaration, ExchangeDecl, QueueDecl
from testbed.core.broker_kinds import KINDS
from testbed.core.scenario import Scenario
from testbed.core.visibility import dead_letter_queue_of, delay_queue_of, holds_head_of_line


def declarations(scenario: Scenario) -> list[Declaration]:
    """Everything the run needs declared before any producer or consumer starts.

    Queues with a visibility timeout get their dead-letter queue (``<queue>.dlq`` unless named)
    and, where the broker kind runs visibility timeouts in delay queues (RabbitMQ), a delay
    queue ``<queue>.vt-delay`` whose messages expire after the timeout back into the queue (see
    :mod:`testbed.control.visibility`). An in-order queue (``visibility.in_order``) has one
    active consumer at a time (``single_active_consumer``) and no delay queue: a failed attempt
    holds the head of the line instead (`testbed.core.visibility.holds_head_of_line`).
    Load-balanced aliases declare every member queue (``<alias>.<i>``, up to ``max_queues``)
    and the alias as a direct exchange binding each member under its own name: producers pick
    the member per message by the forwarding ratios (:mod:`testbed.workload.scaling`).

    A transient queue (``exclusive``/``auto_delete``) is left out where it is a real queue
    (RabbitMQ): its consumer declares and binds it on its own connection
    (`subscription_declarations`). Where it is a topic subscription (ActiveMQ) it stays in, so
    that every process routes to the topic; declaring it creates nothing on the broker.
    """
    topo = scenario.topology
    facts = KINDS[scenario.broker.kind]
    delay_queues = facts.visibility == "delay_queue"
    out: list[Declaration] = [ExchangeDecl(x.name, x.type, x.durable) for x in topo.exchanges]
    declared: set[str] = set()
    for q in topo.queues:
        if q.transient:
            if facts.transient_queues == "topic":
                out.extend(_transient(scenario, q.name))
            continue
        dlq = dead_letter_queue_of(scenario, q.name)
        if dlq and dlq not in declared and scenario.queue(dlq) is None:
            out.append(QueueDecl(dlq, durable=q.durable))
            declared.add(dlq)
        in_order = holds_head_of_line(q.visibility)
        if q.visibility is not None and delay_queues and not in_order:
            out.append(
                QueueDecl(
                    delay_queue_of(q.name),
                    durable=q.durable,
                    dead_letter_to=q.name,
                    message_ttl=q.visibility.timeout,
                )
            )
        out.append(
            QueueDecl(
                q.name,
                durable=q.durable,
                kind=q.type,
                max_length=q.max_length,
                single_active_consumer=in_order,
            )
        )
        declared.add(q.name)
        for b in q.bindings:
            out.append(BindingDecl(b.exchange, q.name, b.key))
    for lb in topo.load_balanced:
        out.append(ExchangeDecl(lb.alias, "direct", lb.durable))
        for i in range(lb.max_queues):
            out.append(QueueDecl(lb.member(i), durable=lb.durable))
            out.append(BindingDecl(lb.alias, lb.member(i), lb.member(i)))
    return out


def _transient(scenario: Scenario, queue: str) -> list[Declaration]:
    q = scenario.queue(queue)
    assert q is not None and q.transient
    decl = QueueDecl(
        q.name, durable=q.durable, exclusive=q.exclusive, auto_delete=q.auto_delete,
        max_length=q.max_length,
    )  # fmt: skip
    return [decl, *(BindingDecl(b.exchange, q.name, b.key) for b in q.bindings)]


def subscription_declarations(scenario: Scenario, queue: str) -> list[Declaration]:
    """What a consumer of `queue` declares on its own connection before consuming, and again
    after each reconnect: a transient queue and its bindings where it is a real queue
    (RabbitMQ), else nothing (``declarations`` has it all)."""
    q = scenario.queue(queue)
    if q is None or not q.transient or KINDS[scenario.broker.kind].transient_queues != "queue":
        return []
    return _transient(scenario, queue)


def all_queue_names(scenario: Scenario) -> list[str]:
    """Queues to watch (stats, drain): declared queues, their DLQs and load-balanced members,
    and transient queues while they exist (RabbitMQ)."""
    names = purgeable_queue_names(scenario)
    if KINDS[scenario.broker.kind].transient_queues == "queue":
        names += [q.name for q in scenario.topology.queues if q.transient]
    return names


def parked_queue_names(scenario: Scenario) -> set[str]:
    """Dead-letter queues that no consumer of the scenario reads: what reaches them stays there
    for the user to inspect, so a drain that waits for them to empty only waits out its timeout
    (the simulator counts a dead-lettered copy as finished too)."""
    read = {c.queue for c in scenario.consumers}
    dlqs = {dead_letter_queue_of(scenario, q.name) for q in scenario.topology.queues}
    return {q for q in dlqs if q is not None and q not in read}


def purgeable_queue_names(scenario: Scenario) -> list[str]:
    """Queues the run declares before it starts (purged of an earlier run's leftovers): all but
    the transient ones, which live with their consumers' connections."""
    return [
        d.name
        for d in declarations(scenario)
        if isinstance(d, QueueDecl) and not (d.exclusive or d.auto_delete)
    ]


def purge(adapter: BrokerAdapter, queues: list[str], timeout: float = 30.0) -> dict[str, int]:
    """Empty `queues` by consuming with auto-ack (works on every broker). Returns counts.

    Leftovers of an earlier run would otherwise be consumed (and timed) by this one. Bounded by
    `timeout` seconds in total; what is left after that stays and shows up as ``unexpected``.
    """
    deadline = time.monotonic() + timeout
    counts: dict[str, int] = {}
    for q in queues:
        consumer = adapter.consumer(q, prefetch=1000, ack_mode="auto")
        n = 0
        try:
            quiet = 0
            while quiet < 2 and time.monotonic() < deadline:
                got = consumer.drain(0.1)
                n += len(got)
                quiet = 0 if got else quiet + 1
        finally:
            consumer.close()
        if n:
            counts[q] = n
    return counts
