"""One conformance suite for every broker adapter, on real brokers (kombu-style).

Each test runs once per adapter: ``rabbitmq-pika``, ``rabbitmq-kombu``, ``activemq-stomp``.
Where brokers differ, the test asserts what the adapter's `capabilities` promise (e.g. ActiveMQ
cannot requeue one message: NACK dead-letters it, a disconnect requeues it). Queue names are
unique per test (and contain dots, which ActiveMQ Virtual Topics must escape), so all tests
share the session brokers; the restart test gets its own.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import psutil
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.brokers import (
    BindingDecl,
    BrokerAdapter,
    Consumer,
    Delivery,
    Destination,
    ExchangeDecl,
    QueueDecl,
    UnsupportedFeature,
    make_adapter,
)
from testbed.brokers.base import HDR_T_PUBLISH_NS, Confirm
from tests.integration.conftest import start_or_fail

pytestmark = pytest.mark.integration

FLAVOURS = {
    "rabbitmq-pika": ("rabbitmq", "pika"),
    "rabbitmq-kombu": ("rabbitmq", "kombu"),
    "activemq-stomp": ("activemq", "stomp"),
}
BODY = b"x" * 200

MakeAdapter = Callable[..., BrokerAdapter]


@pytest.fixture(params=list(FLAVOURS))
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(flavour: str, request: pytest.FixtureRequest) -> Iterator[MakeAdapter]:
    """``make()`` -> a connected adapter for this flavour on the session broker (or on
    ``endpoint=``); all closed after the test."""
    kind, client = FLAVOURS[flavour]
    made: list[BrokerAdapter] = []

    def factory(endpoint: BrokerEndpoint | None = None) -> BrokerAdapter:
        ep = endpoint or request.getfixturevalue(kind)
        adapter = make_adapter(ep, client)
        adapter.connect()
        made.append(adapter)
        return adapter

    yield factory
    for adapter in made:
        adapter.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A unique dotted base name for this test's queues and exchanges."""
    return f"conf.{request.node.originalname.removeprefix('test_')}.{uuid.uuid4().hex[:8]}"


def drain_n(consumer: Consumer, n: int, timeout: float = 10.0) -> list[Delivery]:
    """Exactly `n` deliveries (fails after `timeout` s with what did arrive)."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += consumer.drain(min(0.5, deadline - time.monotonic()), max_messages=n - len(got))
    assert len(got) == n, f"expected {n} deliveries on {consumer.queue!r}, got {len(got)}"
    return got


def assert_quiet(consumer: Consumer, seconds: float = 0.5) -> None:
    extra = consumer.drain(seconds)
    assert not extra, f"unexpected deliveries on {consumer.queue!r}: {[d.msg_id for d in extra]}"


def find_ids(consumer: Consumer, wanted: set[str], timeout: float = 10.0) -> dict[str, Delivery]:
    """Drain until every id in `wanted` showed up (a shared queue may hold other tests'
    messages, left unsettled); returns what was found when `timeout` s are up."""
    found: dict[str, Delivery] = {}
    deadline = time.monotonic() + timeout
    while set(found) != wanted and time.monotonic() < deadline:
        found.update((d.msg_id, d) for d in consumer.drain(0.3) if d.msg_id in wanted)
    return found


def test_round_trip_carries_id_headers_and_publish_ns(make: MakeAdapter, name: str) -> None:
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name)
    sent = {f"{name}-{i}": p.publish(BODY, msg_id=f"{name}-{i}", headers={"trace": f"t{i}"})
            for i in range(3)}  # fmt: skip
    c = a.consumer(name, prefetch=10)
    got = drain_n(c, 3)
    assert [d.msg_id for d in got] == list(sent)
    for i, d in enumerate(got):
        assert d.body == BODY
        assert d.t_publish_ns == sent[d.msg_id]
        assert int(d.headers[HDR_T_PUBLISH_NS]) == sent[d.msg_id]
        assert d.headers["trace"] == f"t{i}"
        assert not d.redelivered
        assert 0 <= d.t_receive_ns - sent[d.msg_id] < 10e9
        d.ack()
    assert c.unsettled == 0


def test_every_connection_to_the_broker_has_nagle_off(
    make: MakeAdapter, flavour: str, request: pytest.FixtureRequest
) -> None:
    """A small frame must not wait in this process's kernel for the broker's delayed ACK: with
    Nagle on (stomp.py's default), ActiveMQ got the producer's SENDs in bursts every 15-45 ms
    and the fan-out's mean latency was 3x the broker's own. Read from the sockets themselves,
    whichever library opened them."""
    ep = request.getfixturevalue(FLAVOURS[flavour][0])
    before = _broker_fds(ep.port)
    a = make()
    a.declare([QueueDecl(f"conf.nagle.{uuid.uuid4().hex[:8]}")])
    fds = _broker_fds(ep.port) - before
    assert fds, f"no new connection to {ep.port} found"
    for fd in fds:
        with socket.socket(fileno=os.dup(fd)) as sock:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), (flavour, fd)


def _broker_fds(port: int) -> set[int]:
    """File descriptors of this process's TCP connections to `port`."""
    return {
        c.fd
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.fd >= 0
    }


def test_every_publish_is_confirmed_once(make: MakeAdapter, name: str) -> None:
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name, persistent=True, confirms=True)
    ids = [f"{name}-{i}" for i in range(300)]
    for msg_id in ids:
        p.publish(BODY, msg_id=msg_id)
    confirms: list[Confirm] = []
    deadline = time.monotonic() + 15
    while len(confirms) < len(ids) and time.monotonic() < deadline:
        confirms += p.poll_confirms(1.0)
    assert sorted(c.msg_id for c in confirms) == sorted(ids)
    assert all(c.ok for c in confirms), [c for c in confirms if not c.ok][:3]
    assert p.in_flight == 0
    c = p.publish_and_wait(BODY, msg_id="closed-loop", timeout=5)
    assert (c.msg_id, c.ok) == ("closed-loop", True)
    assert p.poll_confirms(0.2) == []  # nothing stray, nothing twice


def test_deferred_publishes_arrive_in_order_after_flush(make: MakeAdapter, name: str) -> None:
    """A late generator hands a burst over with ``flush=False``: nothing is lost or reordered,
    and confirms still come back one per message."""
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name, confirms=True)
    ids = [f"{name}-{i}" for i in range(50)]
    for i, msg_id in enumerate(ids):
        p.publish(BODY, msg_id=msg_id, flush=(i % 16 == 15))
    p.flush()
    confirms: list[Confirm] = []
    deadline = time.monotonic() + 15
    while len(confirms) < len(ids) and time.monotonic() < deadline:
        confirms += p.poll_confirms(1.0)
    assert sorted(c.msg_id for c in confirms) == sorted(ids)
    c = a.consumer(name, prefetch=100)
    assert [d.msg_id for d in drain_n(c, len(ids))] == ids


def test_nack_with_requeue(make: MakeAdapter, name: str) -> None:
    a = make()
    a.declare([QueueDecl(name)])
    a.producer(name, persistent=True).publish(BODY, msg_id="m1")
    c = a.consumer(name, prefetch=10)
    (d,) = drain_n(c, 1)
    if a.capabilities.nack_requeue:
        d.nack(requeue=True)
        (again,) = drain_n(c, 1)
        assert (again.msg_id, again.redelivered) == ("m1", True)
        again.ack()
    else:  # ActiveMQ: one message cannot be requeued; the adapter says so instead of guessing
        with pytest.raises(UnsupportedFeature, match="requeue"):
            d.nack(requeue=True)
        assert d.outcome is None and c.unsettled == 1
        d.ack()
    assert_quiet(c, 0.3)


def test_reject_dead_letters(make: MakeAdapter, name: str) -> None:
    a = make()
    caps = a.capabilities
    dlq = caps.fixed_dead_letter_queue or f"{name}.dlq"
    decls = [QueueDecl(name, dead_letter_to=None if caps.fixed_dead_letter_queue else dlq)]
    if caps.per_queue_dead_letter:
        decls.insert(0, QueueDecl(dlq))
    a.declare(decls)
    a.producer(name, persistent=True).publish(BODY, msg_id=f"{name}-p")
    a.producer(name, persistent=False).publish(BODY, msg_id=f"{name}-t")
    c = a.consumer(name, prefetch=10)
    for d in drain_n(c, 2):
        d.reject()
    assert_quiet(c, 0.3)
    dead = a.consumer(dlq, prefetch=1000)
    wanted = {f"{name}-p", f"{name}-t"}
    found = find_ids(dead, wanted, timeout=10.0 if caps.dead_letters_transient else 2.0)
    # ActiveMQ drops a NACKed transient message; RabbitMQ dead-letters both
    assert set(found) == (wanted if caps.dead_letters_transient else {f"{name}-p"})
    for d in found.values():
        d.ack()


@pytest.mark.parametrize("how", ["consumer-close", "connection-close", "connection-abort"])
def test_unacked_messages_are_redelivered_when_consumer_goes(
    make: MakeAdapter, name: str, how: str
) -> None:
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name, persistent=True)
    ids = [f"{name}-{i}" for i in range(5)]
    for msg_id in ids:
        p.publish(BODY, msg_id=msg_id)
    holder = make()
    first = holder.consumer(name, prefetch=10)
    assert [d.msg_id for d in drain_n(first, 5)] == ids  # never acked
    assert first.unsettled == 5
    if how == "consumer-close":
        first.close()
    elif how == "connection-close":
        holder.close()
    else:  # a crashed client: the socket goes, no protocol close
        holder.abort()
        holder.abort()  # idempotent, never raises
    second = a.consumer(name, prefetch=10)
    again = drain_n(second, 5)
    assert sorted(d.msg_id for d in again) == ids
    assert all(d.redelivered for d in again)
    for d in again:
        d.ack()


def test_prefetch_limits_unacked_deliveries(make: MakeAdapter, name: str) -> None:
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name, confirms=True)
    for i in range(20):
        p.publish(BODY, msg_id=f"{name}-{i}")
    while p.in_flight:
        assert p.poll_confirms(5.0), "confirms stalled"
    c = a.consumer(name, prefetch=5)
    held = drain_n(c, 5)
    assert_quiet(c, 0.7)  # exactly N held without acks
    held[0].ack()
    (one_more,) = drain_n(c, 1)
    assert_quiet(c, 0.3)
    for d in [*held[1:], one_more]:
        d.ack()


def test_fanout_reaches_every_subscriber_queue(make: MakeAdapter, name: str) -> None:
    a = make()
    subs = [f"{name}.sub{i}" for i in range(3)]
    a.declare([ExchangeDecl(name, "fanout"), *(QueueDecl(s) for s in subs),
               *(BindingDecl(name, s) for s in subs)])  # fmt: skip
    p = a.producer(Destination.exchange(name), persistent=True, confirms=True)
    ids = [f"{name}-{i}" for i in range(4)]
    for msg_id in ids:
        assert p.publish_and_wait(BODY, msg_id=msg_id).ok
    reader = make()  # another process declaring the same topology, as every process does
    reader.declare([ExchangeDecl(name, "fanout"), *(QueueDecl(s) for s in subs),
                    *(BindingDecl(name, s) for s in subs)])  # fmt: skip
    for s in subs:
        c = reader.consumer(s, prefetch=10)
        got = drain_n(c, 4)
        assert [d.msg_id for d in got] == ids, s
        for d in got:
            d.ack()


def test_topic_routing_by_pattern(make: MakeAdapter, name: str) -> None:
    a = make()
    eu, anything = f"{name}.eu", f"{name}.all"
    a.declare([ExchangeDecl(name, "topic"), QueueDecl(eu), QueueDecl(anything),
               BindingDecl(name, eu, "order.eu.*"), BindingDecl(name, anything, "#")])  # fmt: skip
    p = a.producer(Destination.exchange(name), confirms=True)
    for key in ("order.eu.de", "order.us.ny", "order.eu"):
        assert p.publish_and_wait(BODY, msg_id=key, routing_key=key).ok
    got_eu = drain_n(a.consumer(eu, prefetch=10), 1)
    assert [d.msg_id for d in got_eu] == ["order.eu.de"]
    got_all = drain_n(a.consumer(anything, prefetch=10), 3)
    assert [d.msg_id for d in got_all] == ["order.eu.de", "order.us.ny", "order.eu"]
    for d in [*got_eu, *got_all]:
        d.ack()


def test_persistent_messages_survive_restart_transient_do_not(
    make: MakeAdapter, flavour: str, fresh_backend: Callable[[str], LocalBackend]
) -> None:
    kind, _ = FLAVOURS[flavour]
    backend = fresh_backend(flavour)
    (ep,) = start_or_fail(backend, [kind], label=f"restart {flavour}", detach=False, warm=False)
    q, probe = "durable.q", "probe.q"
    a = make(ep)
    a.declare([QueueDecl(q, durable=True), QueueDecl(probe, durable=True)])
    keep = a.producer(q, persistent=True, confirms=True)
    lose = a.producer(q, persistent=False, confirms=True)
    for i in range(5):
        assert keep.publish_and_wait(BODY, msg_id=f"keep-{i}").ok
        assert lose.publish_and_wait(BODY, msg_id=f"lose-{i}").ok
    probe_p = a.producer(probe, persistent=True, confirms=True)
    probe_c = a.consumer(probe, prefetch=10)

    ep = backend.restart_node(ep.name)

    if a.capabilities.auto_reconnect:  # kombu: the same objects go on working
        # A publish racing the reconnect is reported failed (never silently lost); a
        # closed-loop producer simply sends the next one.
        attempts = [probe_p.publish_and_wait(BODY, msg_id=f"after-{i}", timeout=30)
                    for i in range(3)]  # fmt: skip
        assert attempts[-1].ok, attempts
        ok_ids = [c.msg_id for c in attempts if c.ok]
        got_probe = drain_n(probe_c, len(ok_ids), timeout=30)
        assert [d.msg_id for d in got_probe] == ok_ids
        reader = a
    else:
        reader = make(ep)
    got = drain_n(reader.consumer(q, prefetch=100), 5)
    assert sorted(d.msg_id for d in got) == [f"keep-{i}" for i in range(5)]
    for d in got:
        d.ack()


def test_settling_from_another_thread(make: MakeAdapter, name: str) -> None:
    """A visibility-timeout timer thread may ack/reject; the adapter marshals it to the owner."""
    a = make()
    a.declare([QueueDecl(name)])
    p = a.producer(name)
    for i in range(4):
        p.publish(BODY, msg_id=f"{name}-{i}")
    c = a.consumer(name, prefetch=10)
    got = drain_n(c, 4)
    errors: list[BaseException] = []

    def settle() -> None:
        try:
            for d in got:
                d.ack()
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    t = threading.Thread(target=settle)
    t.start()
    t.join(5)
    assert not errors and c.unsettled == 0
    assert_quiet(c, 0.3)  # owner's drain applies the settlements
    c.close()
    assert_quiet(a.consumer(name, prefetch=10), 0.5)  # nothing came back: the acks took


def test_unroutable_mandatory_publish_is_a_failed_confirm(make: MakeAdapter, name: str) -> None:
    a = make()
    a.declare([ExchangeDecl(name, "direct")])
    dest = Destination.exchange(name, "nobody-bound")
    if not a.capabilities.mandatory:
        with pytest.raises(UnsupportedFeature, match="mandatory"):
            a.producer(dest, confirms=True, mandatory=True)
        return
    p = a.producer(dest, confirms=True, mandatory=True)
    c = p.publish_and_wait(BODY, msg_id="lost")
    assert (c.msg_id, c.ok) == ("lost", False)
    assert "returned" in c.detail
