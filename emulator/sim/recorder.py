"""Columnar in-memory recording of one replication → the record tables (docs/architecture.md).

The one seam for measurement: producers, queues and consumers call ``new_message``,
``confirm``, ``delivery``, ``event`` and ``sample``; nothing else writes records. Columns live in
``array.array`` buffers (8 bytes a value, not a Python object), and ``tables()`` turns them into
pyarrow tables with exactly the schemas of ``testbed.core.records`` — the same tables a live
run writes, so the analysis never knows which side a table came from.

Conventions of the predicted tables:

- ``msg_id`` is the decimal message number within the replication (``"0"``, ``"1"``, ...);
  ``replication`` tells replications apart.
- ``messages.queue`` is the publish destination (a queue or an exchange name), as the producer
  knows it; per-queue figures come from ``deliveries.queue``. ``flow`` is the message type
  (``message_type`` or the producer group's name).
- ``producer`` and ``consumer`` name instances ``<group>-<i>``; a follow-up message's producer
  is the consumer instance that published it.
- ``t_confirm`` is the confirm time, or ``t_publish`` for a producer without publisher confirms
  (as the live client records it; null when never confirmed).
- ``latency_s`` = ``t_deliver - t_publish``; ``t_deliver`` is when the consumer's handler starts
  on the message (a live handler timestamps there), ``t_done`` when it finishes.
"""

from __future__ import annotations

__all__ = ["Recorder", "OUTCOME_CODES"]

import json
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from testbed.core.records import DELIVERIES, EVENTS, MESSAGES, OUTCOMES, TIMESERIES

OUTCOME_CODES = {name: i for i, name in enumerate(OUTCOMES)}
"""Outcome name → small integer used in the hot path."""


class Recorder:
    """Collects one replication's records in columns."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._name_index: dict[str, int] = {}
        # messages
        self.m_flow = array("i")
        self.m_dest = array("i")
        self.m_producer = array("i")
        self.m_size = array("d")
        self.m_t_intended = array("d")
        self.m_t_publish = array("d")
        self.m_t_confirm = array("d")
        # deliveries (redelivered and latency_s are derived in tables())
        self.d_msg = array("q")
        self.d_queue = array("i")
        self.d_consumer = array("i")
        self.d_attempt = array("i")
        self.d_t_deliver = array("d")
        self.d_t_done = array("d")
        self.d_outcome = array("b")
        # events and timeseries are small: plain rows
        self.events: list[tuple[float, str, str, str]] = []
        self.series: list[tuple[Any, ...]] = []
        self._bind()

    def _bind(self) -> None:
        m = (
            self.m_flow.append,
            self.m_dest.append,
            self.m_producer.append,
            self.m_size.append,
            self.m_t_intended.append,
            self.m_t_publish.append,
            self.m_t_confirm.append,
        )
        d = (
            self.d_msg.append,
            self.d_queue.append,
            self.d_consumer.append,
            self.d_attempt.append,
            self.d_t_deliver.append,
            self.d_t_done.append,
            self.d_outcome.append,
        )
        nan = float("nan")
        t_confirm = self.m_t_confirm
        sizes = self.m_size

        def new_message(
            flow: int, dest: int, producer: int, size: float, t_int: float, t_pub: float
        ) -> int:
            """Record a publish; returns the message number."""
            n = len(sizes)
            m[0](flow)
            m[1](dest)
            m[2](producer)
            m[3](size)
            m[4](t_int)
            m[5](t_pub)
            m[6](nan)
            return n

        def delivery(
            msg: int, queue: int, consumer: int, attempt: int, t_del: float, t_done: float, out: int
        ) -> None:
            """Record one delivery attempt (outcome code from OUTCOME_CODES)."""
            d[0](msg)
            d[1](queue)
            d[2](consumer)
            d[3](attempt)
            d[4](t_del)
            d[5](t_done)
            d[6](out)

        def confirm(msg: int, t: float) -> None:
            t_confirm[msg] = t

        self.new_message = new_message
        self.delivery = delivery
        self.confirm = confirm

    # -- names ----------------------------------------------------------------------------

    def name(self, text: str) -> int:
        """Index of a string (queue, producer, consumer, flow) in the name table."""
        i = self._name_index.get(text)
        if i is None:
            i = self._name_index[text] = len(self.names)
            self.names.append(text)
        return i

    # -- small tables ---------------------------------------------------------------------

    def event(self, t: float, kind: str, target: str, detail: dict[str, Any]) -> None:
        self.events.append((t, kind, target, json.dumps(detail, sort_keys=True)))

    def sample(
        self,
        t: float,
        queue: str,
        depth_ready: int,
        depth_unacked: int,
        publish_rate: float,
        deliver_rate: float,
        ack_rate: float,
        consumers: int,
        producers_blocked: int,
        broker_up: bool,
        memory_bytes: int,
    ) -> None:
        self.series.append(
            (
                t,
                queue,
                depth_ready,
                depth_unacked,
                publish_rate,
                deliver_rate,
                ack_rate,
                consumers,
                producers_blocked,
                broker_up,
                memory_bytes,
            )
        )

    @property
    def messages(self) -> int:
        return len(self.m_size)

    # -- output ---------------------------------------------------------------------------

    def tables(self, replication: int) -> dict[str, pa.Table]:
        """The four record tables with exactly the ``testbed.core.records`` schemas."""
        names = pa.array(self.names, type=pa.string())
        n = len(self.m_size)
        rep_m = np.full(n, replication, dtype=np.int32)
        t_conf = np.frombuffer(self.m_t_confirm, dtype=np.float64)
        t_pub = np.frombuffer(self.m_t_publish, dtype=np.float64)
        messages = pa.Table.from_arrays(
            [
                pa.array(np.arange(n, dtype=np.int64)).cast(pa.string()),
                _take(names, self.m_flow),
                _take(names, self.m_dest),
                _take(names, self.m_producer),
                pa.array(np.rint(np.frombuffer(self.m_size, dtype=np.float64)).astype(np.int64)),
                pa.array(np.frombuffer(self.m_t_intended, dtype=np.float64)),
                pa.array(t_pub, mask=np.isnan(t_pub)),  # null: a send missed while cut off
                pa.array(t_conf, mask=np.isnan(t_conf)),
                pa.array(rep_m),
            ],
            schema=MESSAGES,
        )
        msg = np.frombuffer(self.d_msg, dtype=np.int64)
        attempt = np.frombuffer(self.d_attempt, dtype=np.int32)
        t_del = np.frombuffer(self.d_t_deliver, dtype=np.float64)
        outcomes = pa.array(OUTCOMES, type=pa.string())
        deliveries = pa.Table.from_arrays(
            [
                pa.array(msg).cast(pa.string()),
                _take(names, self.d_queue),
                _take(names, self.d_consumer),
                pa.array(attempt),
                pa.array(t_del),
                pa.array(np.frombuffer(self.d_t_done, dtype=np.float64)),
                outcomes.take(pa.array(np.frombuffer(self.d_outcome, dtype=np.int8))),
                pa.array(attempt > 1),
                pa.array(t_del - t_pub[msg] if n else np.zeros(len(msg))),
                pa.array(np.full(len(msg), replication, dtype=np.int32)),
            ],
            schema=DELIVERIES,
        )
        ev: list[Sequence[Any]] = (
            list(zip(*self.events, strict=True)) if self.events else [[], [], [], []]
        )
        events = pa.Table.from_arrays(
            [
                pa.array(ev[0], type=pa.float64()),
                pa.array(ev[1], type=pa.string()),
                pa.array(ev[2], type=pa.string()),
                pa.array(ev[3], type=pa.string()),
                pa.array(np.full(len(self.events), replication, dtype=np.int32)),
            ],
            schema=EVENTS,
        )
        cols: list[Sequence[Any]] = (
            list(zip(*self.series, strict=True)) if self.series else [[]] * 11
        )
        series = pa.Table.from_arrays(
            [pa.array(c, type=TIMESERIES.field(i).type) for i, c in enumerate(cols)]
            + [pa.array(np.full(len(self.series), replication, dtype=np.int32))],
            schema=TIMESERIES,
        )
        return {
            "messages": messages,
            "deliveries": deliveries,
            "timeseries": series,
            "events": events,
        }


def _take(names: pa.Array, idx: array) -> pa.Array:
    """Strings by index, in C (a name table lookup, no Python object per row)."""
    return names.take(pa.array(np.frombuffer(idx, dtype=np.int32)))
