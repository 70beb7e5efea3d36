"""Transient subscriptions in the scenario (docs/models.md §6): queues with ``exclusive`` /
``auto_delete``, producers with ``mandatory``. What follows from "the queue lives with its
consumer's connection", and what a broker cannot do, is an error at load naming the file, line,
field and value; and the workload's declarations put the queue on the consumer's connection."""

from __future__ import annotations

import textwrap

import pytest

from testbed.brokers.base import BindingDecl, QueueDecl
from testbed.core.scenario_loader import parse_scenario
from testbed.workload.topology import (
    all_queue_names,
    declarations,
    purgeable_queue_names,
    subscription_declarations,
)

BASE = """\
name: t
duration: 60s
broker:
  kind: {kind}
topology:
  exchanges:
    - name: fan
      type: fanout
    - name: prices
      type: topic
  queues:
    - name: work
    - name: live
      durable: false
      exclusive: true
producers:
  - name: p
    queue: live
    mandatory: {mandatory}
    arrival: {{kind: poisson, rate: 10/s}}
consumers:
  - name: c
    queue: live
    count: 1
    ack: auto
    service_time: {{kind: exponential, mean: 5ms}}
  - name: w
    queue: work
"""


def parse(text: str, kind: str = "rabbitmq", mandatory: bool = True):  # type: ignore[no-untyped-def]
    return parse_scenario(
        textwrap.dedent(text).format(kind=kind, mandatory=str(mandatory).lower()), "s.yaml"
    )


def errors(text: str, kind: str = "rabbitmq", mandatory: bool = True) -> list[tuple]:  # type: ignore[type-arg]
    scenario, issues = parse(text, kind, mandatory)
    errs = [(i.line, i.path, i.message) for i in issues if i.severity == "error"]
    assert scenario is None or not errs
    return errs


def test_the_base_is_valid_and_the_fields_load() -> None:
    s, issues = parse(BASE)
    assert s is not None, [str(i) for i in issues]
    live = s.queue("live")
    assert live is not None and live.exclusive and not live.auto_delete and live.transient
    assert not s.queue("work").transient  # type: ignore[union-attr]
    assert s.producers[0].mandatory is True
    assert "exclusive: true" in s.resolved_yaml() and "mandatory: true" in s.resolved_yaml()


@pytest.mark.parametrize(
    "change, line, path, fragment",
    [
        (("      durable: false\n      exclusive: true", "      exclusive: true"),
         13, "topology.queues[1].durable", "cannot be durable: set durable: false"),
        (("      exclusive: true", "      exclusive: true\n      type: quorum"),
         15, "topology.queues[1].exclusive", "refuses an exclusive or auto_delete quorum queue"),
        (("    count: 1\n    ack: auto", "    count: 2\n    ack: auto"),
         24, "consumers[0].count", "exclusive: only the connection that declares it"),
        (("  - name: w\n    queue: work", "  - name: w\n    queue: live"),
         15, "topology.queues[1].exclusive", "exactly one consumer group must read it"),
        (("      exclusive: true", "      exclusive: true\n      visibility: {{timeout: 1s}}"),
         16, "topology.queues[1].visibility", "not supported on a transient queue"),
    ],
)  # fmt: skip
def test_what_a_transient_queue_cannot_be(
    change: tuple[str, str], line: int, path: str, fragment: str
) -> None:
    old, new = change
    assert old in BASE
    errs = errors(BASE.replace(old, new))
    assert any(p == path and fragment in m and ln == line for ln, p, m in errs), errs


def test_auto_delete_may_have_several_consumers() -> None:
    text = BASE.replace("      exclusive: true", "      auto_delete: true").replace(
        "    count: 1\n    ack: auto", "    count: 3\n    ack: auto"
    )
    assert errors(text) == []


def test_mandatory_is_refused_where_the_broker_cannot_return_messages() -> None:
    errs = errors(BASE, kind="activemq")
    assert errs == [
        (
            19,
            "producers[0].mandatory",
            "mandatory: true is not possible on ActiveMQ: ActiveMQ drops a message sent to a "
            "topic nobody subscribes to without telling the producer (STOMP has no "
            "basic.return); remove it (what a transient subscription misses then counts as "
            "lost)",
        )
    ]
    assert errors(BASE, kind="activemq", mandatory=False) == []


def test_on_activemq_a_transient_queue_follows_its_name_or_one_fanout_exchange() -> None:
    topic = BASE.replace(
        "      exclusive: true",
        "      exclusive: true\n      bindings: [{{exchange: prices, key: a}}]",
    )
    errs = errors(topic, kind="activemq", mandatory=False)
    assert [(p, "not the topic exchange 'prices'" in m) for _, p, m in errs] == [
        ("topology.queues[1].bindings[0].exchange", True)
    ]
    assert errors(topic) == []  # RabbitMQ binds it on the consumer's connection
    both = BASE.replace(
        "      exclusive: true", "      exclusive: true\n      bindings: [{{exchange: fan}}]"
    )
    errs = errors(both, kind="activemq", mandatory=False)
    assert [p for _, p, _ in errs] == ["topology.queues[1].bindings[0].exchange"]
    assert "not both" in errs[0][2]


def test_rabbitmq_declares_a_transient_queue_on_its_consumers_connection_only() -> None:
    text = BASE.replace(
        "      exclusive: true", "      exclusive: true\n      bindings: [{{exchange: fan}}]"
    )
    s, _ = parse(text)
    assert s is not None
    shared = declarations(s)
    assert not any(getattr(d, "queue", getattr(d, "name", "")) == "live" for d in shared)
    assert subscription_declarations(s, "live") == [
        QueueDecl("live", durable=False, exclusive=True),
        BindingDecl("fan", "live", ""),
    ]
    assert subscription_declarations(s, "work") == []
    assert purgeable_queue_names(s) == ["work"]  # nothing to purge of a queue that comes and goes
    assert all_queue_names(s) == ["work", "live"]  # watched while it exists


def test_activemq_routes_every_process_to_the_topic() -> None:
    s, _ = parse(BASE, kind="activemq", mandatory=False)
    assert s is not None
    assert QueueDecl("live", durable=False, exclusive=True) in declarations(s)
    assert subscription_declarations(s, "live") == []
    assert purgeable_queue_names(s) == all_queue_names(s) == ["work"]
