"""Broker statistics pollers against the real brokers: depths, consumers, rates, broker_up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import (
    BindingDecl,
    Delivery,
    Destination,
    ExchangeDecl,
    QueueDecl,
    make_adapter,
)
from testbed.observe.stats import BrokerStats, QueueStats, make_stats_poller

pytestmark = pytest.mark.integration

N, PREFETCH = 60, 10


def poll_until(
    poll: Callable[[], BrokerStats], ok: Callable[[BrokerStats], bool], timeout: float = 30.0
) -> BrokerStats:
    """Poll (every 0.25 s) until `ok`; fail with the last stats after `timeout` s.

    RabbitMQ's management API refreshes queue figures at its sample granularity (5 s with the
    default ``sample_retention_policies``), so a new queue and its rates take up to ~10 s.
    """
    deadline = time.monotonic() + timeout
    while True:
        stats = poll()
        if ok(stats) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert ok(stats), f"stats never matched within {timeout} s; last: {stats}"
    return stats


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_depths_consumers_and_rates(kind: str, request: pytest.FixtureRequest) -> None:
    ep: BrokerEndpoint = request.getfixturevalue(kind)
    queue = f"stats.{uuid.uuid4().hex[:8]}"
    a = make_adapter(ep)
    a.connect()
    poller = make_stats_poller(ep, queues=[queue])
    try:
        a.declare([QueueDecl(queue)])
        p = a.producer(queue, persistent=True, confirms=True)
        for i in range(N):
            p.publish(b"x" * 200, msg_id=f"m{i}")
        while p.in_flight:
            assert p.poll_confirms(5.0), "confirms stalled"
        c = a.consumer(queue, prefetch=PREFETCH)
        held: list[Delivery] = []
        deadline = time.monotonic() + 10
        while len(held) < PREFETCH and time.monotonic() < deadline:
            held += c.drain(0.5)
        assert len(held) == PREFETCH

        want = QueueStats(ready=N - PREFETCH, unacked=PREFETCH, consumers=1)

        def depths_match(s: BrokerStats) -> bool:
            q = s.queues.get(queue)
            return q is not None and (q.ready, q.unacked, q.consumers) == (
                want.ready, want.unacked, want.consumers,
            )  # fmt: skip

        stats = poll_until(poller.poll, depths_match)
        assert stats.broker_up and stats.error is None
        assert stats.memory_bytes is not None and stats.memory_bytes > 0
        assert set(stats.queues) == {queue}  # the `queues` filter holds

        # Traffic between polls: publish, deliver and ack rates all become positive.
        def rates_positive(s: BrokerStats) -> bool:
            for i in range(20):
                p.publish(b"y" * 200, msg_id=f"r{time.monotonic_ns()}-{i}")
            for d in held:
                d.ack()
            held[:] = c.drain(0.2)
            q = s.queues.get(queue)
            return q is not None and min(q.publish_rate, q.deliver_rate, q.ack_rate) > 0

        stats = poll_until(poller.poll, rates_positive)
        assert stats.broker_up
    finally:
        poller.close()
        a.close()


def test_activemq_reports_virtual_topic_queues_by_logical_name(activemq: BrokerEndpoint) -> None:
    x, sub = f"stats.x.{uuid.uuid4().hex[:8]}", f"stats.sub.{uuid.uuid4().hex[:8]}"
    a = make_adapter(activemq)
    a.connect()
    poller = make_stats_poller(activemq, queues=[sub])
    try:
        a.declare([ExchangeDecl(x, "fanout"), QueueDecl(sub), BindingDecl(x, sub)])
        p = a.producer(Destination.exchange(x), confirms=True)
        for i in range(3):
            assert p.publish_and_wait(b"f", msg_id=f"f{i}").ok
        stats = poll_until(poller.poll, lambda s: sub in s.queues and s.queues[sub].ready == 3)
        assert stats.queues[sub].consumers == 0
    finally:
        poller.close()
        a.close()


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_unreachable_broker_is_reported_down_not_raised(
    kind: str, request: pytest.FixtureRequest
) -> None:
    ep: BrokerEndpoint = request.getfixturevalue(kind)
    gone = BrokerEndpoint(
        kind=ep.kind, name="gone", host="127.0.0.1", port=1, username=ep.username,
        password=ep.password, management_url="http://127.0.0.1:1" if ep.management_url else None,
    )  # fmt: skip
    poller = make_stats_poller(gone, timeout=1.0)
    started = time.monotonic()
    stats = poller.poll()
    poller.close()
    assert not stats.broker_up
    assert stats.error
    assert stats.queues == {}
    assert time.monotonic() - started < 5
