"""What each broker adapter claims it can do, pinned. tests/integration/test_conformance.py
branches on an adapter's own `capabilities`, so a flag flipped by mistake (say ActiveMQ claiming
``nack_requeue``) would quietly move that adapter onto another branch of the conformance suite
instead of failing it. The table below is the promise; changing a claim means changing it here
too, on purpose. Capabilities are class-level, so no broker is needed."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.brokers import CLIENTS, Capabilities, adapter_class

FLAVOURS = [("rabbitmq", "pika"), ("rabbitmq", "kombu"), ("activemq", "stomp")]
ALL = frozenset({"direct", "topic", "fanout"})

TABLE: dict[str, tuple[object, object, object]] = {
    #                        rabbitmq-pika  rabbitmq-kombu  activemq-stomp
    "confirms":               (True,         True,           True),
    "exchange_types":         (ALL,          ALL,            ALL),
    "topic_wildcards":        (True,         True,           True),
    "nack_requeue":           (True,         True,           False),  # NACK dead-letters on STOMP
    "nack_dead_letters":      (True,         True,           True),
    "per_queue_dead_letter":  (True,         True,           False),
    "fixed_dead_letter_queue": (None,        None,           "ActiveMQ.DLQ"),
    "dead_letters_transient": (True,         True,           False),
    "requeue_on_disconnect":  (True,         True,           True),
    "redelivered_flag":       (True,         True,           True),
    "prefetch":               (True,         True,           True),
    "quorum_queues":          (True,         True,           False),
    "max_length":             (True,         True,           False),
    "mandatory":              (True,         True,           False),
    "exclusive_queues":       (True,         True,           False),
    "auto_delete_queues":     (True,         True,           False),
    "auto_reconnect":         (False,        True,           False),  # kombu's ensure()
}  # fmt: skip


def test_every_adapter_is_pinned() -> None:
    assert [(kind, client) for kind, clients in CLIENTS.items() for client in clients] == FLAVOURS
    assert list(TABLE) == [f.name for f in dataclasses.fields(Capabilities)]


@pytest.mark.parametrize(
    "column, flavour", list(enumerate(FLAVOURS)), ids=[f"{k}-{c}" for k, c in FLAVOURS]
)
def test_capabilities_are_the_pinned_ones(column: int, flavour: tuple[str, str]) -> None:
    kind, client = flavour
    claimed = dataclasses.asdict(adapter_class(kind, client).capabilities)
    expected = {name: row[column] for name, row in TABLE.items()}
    differ = {k: (claimed[k], expected[k]) for k in expected if claimed[k] != expected[k]}
    assert claimed == expected, f"{kind}-{client} (claimed, pinned): {differ}"


def test_the_default_client_is_the_first_pinned_one() -> None:
    assert adapter_class("rabbitmq") is adapter_class("rabbitmq", "pika")
    assert adapter_class("activemq") is adapter_class("activemq", "stomp")
