"""A crash that lands while a consumer settles a delivery waits for the delivery's record.

The crash plan raises a crash inside a consumer's greenlet wherever it is. When that was inside
the ack (a socket write that can yield to the hub), the broker had the ack, but the consumer
recorded the delivery as ``crashed``: the message was never redelivered and the ledger counted
it lost (`test_client_crashes_redeliver_and_restart[activemq]` failed so about one run in 50).
Here the crash is delivered *during* a real ack, on both brokers: a broken loop kills at once
(the kill callable is called) or records ``crashed``; a correct one records ``acked``, raises
the crash right after, and the broker has nothing to redeliver.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
from testbed.brokers.base import Delivery, Destination
from testbed.core.clock import RunClock
from testbed.core.scenario_loader import parse_scenario
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.crashes import ClientCrash
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


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_crash_during_the_ack_comes_after_the_record(
    kind: str, request: pytest.FixtureRequest
) -> None:
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
    killed: list[ClientCrash] = []
    try:
        (d,) = _drain_one(adapter, queue, 10.0)
        real = d._settle
        assert real is not None

        def settle_under_crash(delivery: Delivery, action: str, requeue: bool) -> None:
            loop.crash(ClientCrash("consumer_crash", None), killed.append)  # the plan fires
            real(delivery, action, requeue)

        d._settle = settle_under_crash
        with pytest.raises(ClientCrash):
            loop._handle(d)
        assert killed == [], "the crash was delivered inside the ack, before the record"
        assert recorder.outcomes == ["acked"]
        assert not loop.settling
        # outside a settle a crash goes to the greenlet at once
        loop.crash(ClientCrash("consumer_crash", None), killed.append)
        assert len(killed) == 1
    finally:
        adapter.abort()  # as a crashed client: no protocol close
    # the ack reached the broker: nothing comes back to a new consumer
    again = make_adapter(endpoint, CLIENTS[kind])
    again.connect()
    try:
        assert _drain_one(again, queue, 2.0) == []
    finally:
        again.close()
