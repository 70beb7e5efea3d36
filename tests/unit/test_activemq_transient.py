"""How a transient queue lives on ActiveMQ (no broker needed: the mapping is client-side): a
non-durable topic subscription, nothing created on the broker, producers routed to the topic."""

from __future__ import annotations

import pytest

from testbed.brokers.activemq_topology import ActiveMQTopology
from testbed.brokers.base import (
    BindingDecl,
    Destination,
    ExchangeDecl,
    QueueDecl,
    UnsupportedFeature,
)


def test_a_transient_queue_is_a_topic_subscription_of_its_own_name() -> None:
    t = ActiveMQTopology()
    made = t.add([QueueDecl("work"), QueueDecl("live.q", durable=False, exclusive=True)])
    assert made == ["work"]  # no broker queue for the transient one
    assert t.subscription("live.q") == "/topic/live%2Eq"  # one topic word, no wildcard
    assert t.route(Destination.queue("live.q"), None) == "/topic/live%2Eq"
    assert t.subscription("work") == t.route(Destination.queue("work"), None) == "/queue/work"


def test_bound_to_a_fanout_exchange_it_subscribes_to_the_virtual_topic() -> None:
    t = ActiveMQTopology()
    made = t.add(
        [
            ExchangeDecl("news", "fanout"),
            QueueDecl("kept"),
            QueueDecl("live", durable=False, auto_delete=True),
            BindingDecl("news", "kept"),
            BindingDecl("news", "live"),
        ]
    )
    assert made == ["Consumer.kept.VirtualTopic.news"]
    assert t.subscription("live") == "/topic/VirtualTopic.news"
    assert t.route(Destination.exchange("news"), None) == "/topic/VirtualTopic.news"


def test_a_direct_or_topic_exchange_has_no_topic_to_subscribe_to() -> None:
    t = ActiveMQTopology()
    with pytest.raises(UnsupportedFeature, match="not the direct exchange 'x'"):
        t.add(
            [
                ExchangeDecl("x", "direct"),
                QueueDecl("live", durable=False, exclusive=True),
                BindingDecl("x", "live", "k"),
            ]
        )
