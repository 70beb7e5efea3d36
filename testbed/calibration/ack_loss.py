"""Acks a broker kill forgets: the profile's ``restart_time.ack_loss_s`` (docs/models.md §6).

A broker that makes consumers' acks of persistent messages durable lazily forgets the last of
them when it is killed: those messages come back after the restart and the ledger counts them
as duplicates. How many is a property of the broker and its store, not of the scenario:
RabbitMQ forgot the acks of roughly the last 40 ms on this machine class (4 duplicates acked in
the 22 ms before a kill at 100 msg/s, 5 in the 45 ms before one at 50 msg/s), ActiveMQ 1-2
per kill at 89 msg/s. So it is measured where the restart time
is (`testbed.calibration.restart`), on the same kill: for `LOAD_S` seconds before it a producer
sends persistent messages at `RATE` msg/s to a durable queue and waits for their confirms, as a
PCM producer does, and a consumer of the scenario's client library acks each as it arrives
(without confirms, two kills of RabbitMQ brought back no message at all, while the PCM
scenario's live runs counted duplicates). After the restart the queue is drained, and the acked
messages that come back are the forgotten acks. Their number over the ack rate is the window of
acks a kill forgets (s), which the simulator applies to every kill (`emulator.sim.faults`).

Hand-written because no library measures a broker's ack durability; it uses the broker adapters
of the live workload, so the figure holds for the client library the runs use.
"""

from __future__ import annotations

__all__ = ["LOAD_S", "RATE", "AckLoad"]

import time
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import Consumer, Destination, QueueDecl, make_adapter
from testbed.workload.topology import purge

LOAD_S = 2.0
"""Seconds of acked load before the kill."""
RATE = 100.0
"""msg/s of that load: the rate of the broker-kill scenario of the library."""
DRAIN_QUIET_S = 1.0
"""After the restart, the queue is drained until nothing has come for this long."""
DRAIN_TIMEOUT_S = 15.0
"""Longest the drain after the restart may take (s)."""
BODY = b"a" * 1024
QUEUE = "mqbed-cal-ack-loss"
"""The load's durable queue (emptied before each load; left empty after it)."""


class AckLoad:
    """An acked persistent load on a durable queue of its own, up to a kill."""

    def __init__(self, endpoint: BrokerEndpoint, client: str) -> None:
        self.client, self.queue = client, QUEUE
        self.acked: dict[str, float] = {}
        self.adapter: Any = make_adapter(endpoint, client)
        self.adapter.connect()
        self.adapter.declare([QueueDecl(self.queue, durable=True)])
        purge(self.adapter, [self.queue], timeout=10.0)  # what an interrupted one left

    def run(self, seconds: float = LOAD_S, rate: float = RATE) -> float:
        """Publish and ack for `seconds`; the ack rate of the last second (acks/s)."""
        producer = self.adapter.producer(
            Destination.queue(self.queue), persistent=True, confirms=True
        )
        consumer: Consumer = self.adapter.consumer(self.queue, prefetch=10, ack_mode="manual")
        start = time.monotonic()
        n = 0
        while (due := start + n / rate) < start + seconds:
            producer.publish(BODY, msg_id=f"a{n}")
            n += 1
            while (wait := due + 1 / rate - time.monotonic()) > 0:
                for d in consumer.drain(timeout=wait):
                    d.ack()
                    self.acked[d.msg_id] = time.monotonic()
                producer.poll_confirms(0.0)
        end = time.monotonic()
        recent = sum(1 for t in self.acked.values() if t >= end - 1.0)
        return float(recent)

    def abort(self) -> None:
        """Drop the connection (the broker was killed under it)."""
        self.adapter.abort()

    def forgotten(self, endpoint: BrokerEndpoint) -> int:
        """After the restart: drain the queue (acking); how many of the messages acked before
        the kill came back."""
        adapter: Any = make_adapter(endpoint, self.client)
        adapter.connect()
        back: set[str] = set()
        try:
            consumer = adapter.consumer(self.queue, prefetch=100, ack_mode="manual")
            t0 = last = time.monotonic()
            while time.monotonic() - last < DRAIN_QUIET_S:
                if time.monotonic() - t0 > DRAIN_TIMEOUT_S:
                    break
                got = consumer.drain(timeout=0.2)
                for d in got:
                    d.ack()
                    back.add(d.msg_id)
                if got:
                    last = time.monotonic()
            consumer.close()
        finally:
            adapter.close()
        return len(back & set(self.acked))
