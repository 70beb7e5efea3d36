"""A follow-up is published as persistent as its own spec says, on a real RabbitMQ.

The simulator reads `follow_ups[*].persistent`; the live consumer used to publish every follow-up
as persistent as *its own* queue was durable, so in SPECjms2007 interaction 1 (durable queues by
default) StatInfo went to disk live and not in the prediction. A broken loop fails here: the
transient follow-up arrives with delivery mode 2, or the persistent one from a non-durable
queue's consumer with mode 1.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pika
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter
from testbed.core.clock import RunClock
from testbed.core.scenario_loader import parse_scenario
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.topology import declarations

pytestmark = pytest.mark.integration

SCENARIO = """
name: follow-up-persistence
duration: 5s
topology:
  queues:
    - {{name: {p}in-durable, durable: true}}
    - {{name: {p}in-transient, durable: false}}
    - {{name: {p}to-disk}}
    - {{name: {p}in-memory}}
producers:
  - {{name: src, queue: {p}in-durable, arrival: {{kind: constant, rate: 1/s}}}}
consumers:
  - name: from-durable
    queue: {p}in-durable
    follow_ups:
      - {{message_type: T, queue: {p}in-memory, persistent: false}}
      - {{message_type: P, queue: {p}to-disk, persistent: true}}
  - name: from-transient
    queue: {p}in-transient
    follow_ups:
      - {{message_type: T, queue: {p}in-memory, persistent: false}}
      - {{message_type: P, queue: {p}to-disk, persistent: true}}
"""


class _Recorder:
    """Takes the `messages` rows the loop writes (the run's recorder is not under test)."""

    id_prefix = "t."

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def message(self, *row: Any) -> None:
        self.rows.append(row)


def _modes(endpoint: BrokerEndpoint, queue: str, n: int) -> list[int | None]:
    """The delivery modes of the first `n` messages of `queue` (basic.get, bounded)."""
    creds = pika.PlainCredentials(endpoint.username, endpoint.password)
    params = pika.ConnectionParameters(
        "127.0.0.1", endpoint.port, endpoint.vhost, creds, blocked_connection_timeout=10
    )
    modes: list[int | None] = []
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        for _ in range(n):
            method, props, _body = ch.basic_get(queue, auto_ack=True)
            assert method is not None, f"{queue}: only {len(modes)} of {n} messages"
            modes.append(props.delivery_mode)
        ch.queue_delete(queue)
    return modes


def test_each_follow_up_is_as_persistent_as_its_spec(rabbitmq: BrokerEndpoint) -> None:
    prefix = f"fu-{uuid.uuid4().hex[:6]}-"
    s, issues = parse_scenario(SCENARIO.format(p=prefix))
    assert s is not None, [str(i) for i in issues]
    adapter = make_adapter(rabbitmq, "pika")
    adapter.connect()
    try:
        adapter.declare(declarations(s))
        for spec in s.consumers:
            recorder = _Recorder()
            loop = ConsumerLoop(
                spec, s, adapter, recorder,  # type: ignore[arg-type]
                RunClock(0), np.random.default_rng(0), f"{spec.name}-0", lambda: False,
            )  # fmt: skip
            for f in spec.follow_ups:
                loop._publish_follow_up(f)
            assert [r[1] for r in recorder.rows] == ["T", "P"]  # both recorded as sent
    finally:
        adapter.close()
    # each consumer published one of each: mode 2 only where the follow-up asked for it
    assert _modes(rabbitmq, f"{prefix}to-disk", 2) == [2, 2]
    assert [m or 1 for m in _modes(rabbitmq, f"{prefix}in-memory", 2)] == [1, 1]
