"""A consumer's own publishes: the copies it re-enqueues and the follow-ups of its handlers.

Part of `testbed.workload.consumer.ConsumerLoop` (its base class), apart so that the loop's module
holds the delivery path only. Follow-ups go out after a successful service, each a publish span
of the process's CPU (`testbed.observe.process_cpu`), stamped as it is sent.
"""

from __future__ import annotations

__all__ = ["ConsumerPublishing"]

from typing import Any

import numpy as np

from testbed.brokers.base import HDR_T_PUBLISH_NS, BrokerAdapter, Delivery, Destination, Producer
from testbed.core.clock import RunClock
from testbed.core.scenario import ConsumerSpec, FollowUpSpec
from testbed.core.visibility import delay_queue_of
from testbed.observe.process_cpu import SPANS
from testbed.observe.recorder import Recorder
from testbed.workload.config import HDR_ATTEMPT, HDR_TYPE
from testbed.workload.producer import body_of


class ConsumerPublishing:
    """The publishing helpers of a consumer instance (set up by `ConsumerLoop.__init__`)."""

    spec: ConsumerSpec
    adapter: BrokerAdapter
    recorder: Recorder
    clock: RunClock
    rng: np.random.Generator
    name: str
    _durable: bool
    _producers: dict[str, Producer]
    _follow_seq: int
    _uniform: Any

    def _producer(self, dest: Destination, persistent: bool | None = None) -> Producer:
        """A producer on `dest`, persistent as asked (None: as this consumer's queue)."""
        persistent = self._durable if persistent is None else persistent
        key = f"{dest.kind}:{dest.name}:{int(persistent)}"
        p = self._producers.get(key)
        if p is None:
            p = self.adapter.producer(dest, persistent=persistent, confirms=False)
            self._producers[key] = p
        return p

    def _republish(self, d: Delivery, attempt: int, queue: str, delay: float = 0.0) -> None:
        """Re-enqueue a copy (same id, publish time and type; new attempt) to `queue`,
        invisible for `delay` seconds (see :mod:`testbed.control.visibility`)."""
        headers = {k: v for k, v in d.headers.items() if k.startswith("x-mqbed-")}
        headers[HDR_ATTEMPT] = attempt
        if d.t_publish_ns is not None:
            headers[HDR_T_PUBLISH_NS] = d.t_publish_ns
        if delay > 0:
            queue = delay_queue_of(queue)  # RabbitMQ: TTL = VT, dead-letters back into the queue
        self._producer(Destination.queue(queue)).publish(d.body, msg_id=d.msg_id, headers=headers)

    def _follow_ups(self, d: Delivery, msg_type: str) -> None:
        for f in self.spec.follow_ups:
            if (f.on is not None and f.on != msg_type) or (
                f.probability < 1.0 and self._uniform() >= f.probability
            ):
                continue
            self._publish_follow_up(f)

    def _publish_follow_up(self, f: FollowUpSpec) -> None:
        SPANS.start()
        try:
            self._send_follow_up(f)
        finally:
            SPANS.publish_s += SPANS.stop()

    def _send_follow_up(self, f: FollowUpSpec) -> None:
        if f.queue is not None:
            dest = Destination.queue(f.queue)
        else:
            dest = Destination.exchange(f.exchange or "", f.routing_key or "")
        size = max(0, int(f.size.sample(self.rng)))
        msg_id = f"{self.recorder.id_prefix}{self.name}.f{self._follow_seq}"
        self._follow_seq += 1
        t_intended = self.clock.now()
        t_ns = self._producer(dest, f.persistent).publish(  # as the simulator: its own flag
            body_of(size),
            msg_id=msg_id,
            headers={HDR_TYPE: f.message_type, HDR_ATTEMPT: 1},
            routing_key=f.routing_key,
        )
        t_pub = self.clock.of_ns(t_ns)
        self.recorder.message(
            msg_id, f.message_type, f.destination, self.name, size, t_intended, t_pub, t_pub, True
        )
