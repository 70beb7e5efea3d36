"""A crash that lands while a consumer settles a delivery waits for the delivery's record.

The crash plan raises a crash inside a consumer's greenlet wherever it is. When that was inside
the ack (a socket write that can yield to the hub), the broker had the ack, but the consumer
recorded the delivery as ``crashed``: the message was never redelivered and the ledger counted
it lost (`test_client_crashes_redeliver_and_restart[activemq]` failed so about one run in 50).
Here the crash is delivered *during* a real ack, on both brokers, through `throw_crash` into a
real greenlet: a broken loop takes it inside the ack (no record) or records ``crashed``; a
correct one records ``acked``, raises the crash right after, and the broker has nothing to
redeliver. The second test is the race that remained (2026-12-02): the crash is called while the
consumer is still in its service wait, but the wake-up of that wait was scheduled first, so the
consumer is settling by the time the crash lands.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import gevent
import gevent.event
import numpy as np
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
from testbed.brokers.base import Delivery, Destination
from testbed.core.clock import RunClock
from testbed.core.scenario_loader import parse_scenario
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.crashes import ClientCrash, throw_crash
from testbed.workload.topology import declarations

pytestmark = pytest.mark.integration

SCENARIO = """
name: crash-while-settling
duration: 5s
broker: {{kind: {kind}}}
topology:
  queues: [{{name: {q}}}]
producers:
  - {{name: src, queue: {q}, arrival: {{kind: constant, rate: 1/s}}}}
consumers:
  - {{name: c, queue: {q}, service_time: {{kind: deterministic, value: 0ms}}}}
"""

CLIENTS = {"rabbitmq": "pika", "activemq": "stomp"}


class _Recorder:
    """Takes the `deliveries` rows the loop writes (the run's recorder is not under test)."""

    id_prefix = "t."

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def delivery(self, *row: Any, **_: Any) -> None:
        self.outcomes.append(row[6])

    def message(self, *row: Any) -> None:
        pass

    def event(self, *row: Any) -> None:
        pass


def _drain_one(adapter: Any, queue: str, within: float) -> list[Delivery]:
    consumer = adapter.consumer(queue, prefetch=1, ack_mode="manual", declare=())
    deadline = time.monotonic() + within
    got: list[Delivery] = []
    while not got and time.monotonic() < deadline:
        got = consumer.drain(0.2)
    return got


def _setup(kind: str, request: pytest.FixtureRequest) -> tuple[Any, str, ConsumerLoop, _Recorder]:
    """A queue holding one message, and a consumer loop on a connection to it."""
    endpoint: BrokerEndpoint = request.getfixturevalue(kind)
    queue = f"settle-{uuid.uuid4().hex[:8]}"
    s, issues = parse_scenario(SCENARIO.format(kind=kind, q=queue))
    assert s is not None, [str(i) for i in issues]
    adapter = make_adapter(endpoint, CLIENTS[kind])
    adapter.connect()
    adapter.declare(declarations(s))
    adapter.producer(Destination.queue(queue), persistent=False, confirms=False).publish(
        b"x", msg_id="m1", headers={}
    )
    recorder = _Recorder()
    loop = ConsumerLoop(
        s.consumers[0], s, adapter, recorder,  # type: ignore[arg-type]
        RunClock(0), np.random.default_rng(0), "c.0", lambda: False,
    )  # fmt: skip
    return adapter, queue, loop, recorder


def _yielding_settle(d: Delivery, before: Any = None) -> None:
    """Make `d`'s ack yield to the hub first (as a socket write may), after `before()`."""
    real = d._settle
    assert real is not None

    def settle(delivery: Delivery, action: str, requeue: bool) -> None:
        if before is not None:
            before()
        gevent.sleep(0)
        real(delivery, action, requeue)

    d._settle = settle


def _nothing_comes_back(endpoint: BrokerEndpoint, kind: str, queue: str) -> None:
    """The ack reached the broker: nothing comes back to a new consumer."""
    again = make_adapter(endpoint, CLIENTS[kind])
    again.connect()
    try:
        assert _drain_one(again, queue, 2.0) == []
    finally:
        again.close()


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_crash_during_the_ack_comes_after_the_record(
    kind: str, request: pytest.FixtureRequest
) -> None:
    adapter, queue, loop, recorder = _setup(kind, request)
    try:
        (d,) = _drain_one(adapter, queue, 10.0)
        holder: list[gevent.Greenlet] = []
        _yielding_settle(
            d, lambda: throw_crash(holder[0], ClientCrash("consumer_crash", None), loop)
        )
        glet = gevent.spawn(loop._handle, d)
        holder.append(glet)
        glet.join(10.0)
        assert glet.dead
        assert isinstance(glet.exception, ClientCrash), "the crash was lost"
        assert recorder.outcomes == ["acked"], "the crash landed inside the ack, before the record"
        assert not loop.settling
        # outside a settle a crash lands where the greenlet is: inside its wait
        waiting = gevent.spawn(gevent.sleep, 5.0)
        gevent.sleep(0)
        throw_crash(waiting, ClientCrash("consumer_crash", None), loop)
        waiting.join(2.0)
        assert isinstance(waiting.exception, ClientCrash)
    finally:
        adapter.abort()  # as a crashed client: no protocol close
    _nothing_comes_back(request.getfixturevalue(kind), kind, queue)


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_crash_called_as_the_service_ends_comes_after_the_record(
    kind: str, request: pytest.FixtureRequest
) -> None:
    adapter, queue, loop, recorder = _setup(kind, request)
    try:
        (d,) = _drain_one(adapter, queue, 10.0)
        _yielding_settle(d)
        service_over = gevent.event.Event()
        loop._serve = lambda seconds: service_over.wait(10.0)  # type: ignore[method-assign]
        glet = gevent.spawn(loop._handle, d)
        gevent.sleep(0)  # the consumer is in its service wait, not settling

        def end_service_then_crash() -> None:
            service_over.set()  # its wake-up is scheduled first ...
            throw_crash(glet, ClientCrash("consumer_crash", None), loop)  # ... then the crash

        assert not loop.settling
        gevent.spawn(end_service_then_crash).join(2.0)
        glet.join(10.0)
        assert glet.dead
        assert isinstance(glet.exception, ClientCrash), "the crash was lost"
        assert recorder.outcomes == ["acked"], "the crash landed inside the ack, before the record"
    finally:
        adapter.abort()
    _nothing_comes_back(request.getfixturevalue(kind), kind, queue)
