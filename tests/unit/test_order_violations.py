"""The ledger's order violations (`testbed.core.ordering`) on hand-built tables, and the same
count from the simulator's streamed ledger."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from emulator.predict import predict
from emulator.sim import recorder as sim_recorder
from emulator.sim.model import Model
from testbed.core.ledger import compute_ledger
from testbed.core.ordering import OrderCheck, order_violations, publish_sequence
from testbed.core.profile import Profile, default_profile
from testbed.core.records import DELIVERIES, MESSAGES, Ledger
from testbed.core.scenario_loader import parse_scenario


def test_an_ack_older_than_one_acked_before_is_a_violation() -> None:
    """One queue, one stream, acks of sequence 0 2 1 3 1: the 1 after the 2 and the 1 (a
    duplicate) after the 3 are violations; equal sequences are not."""
    check = OrderCheck()
    assert check.feed(np.zeros(5), np.zeros(5), np.array([0, 2, 1, 3, 1])) == 2
    assert check.feed(np.zeros(2), np.zeros(2), np.array([3, 4])) == 0  # 3 again: not lower
    assert check.violations == 2


def test_streams_and_queues_are_checked_apart() -> None:
    """Two producers interleaved and a fan-out copy acked late in another queue are in order:
    only a lower sequence of the same stream on the same queue counts."""
    queue = np.array([0, 0, 0, 0, 1, 1])
    stream = np.array([0, 1, 0, 1, 0, 0])
    seq = np.array([5, 0, 6, 1, 6, 5])  # queue 1 acks stream 0's 6 before its 5
    assert OrderCheck().feed(queue, stream, seq) == 1


def test_feeding_in_batches_counts_as_feeding_at_once() -> None:
    rng = np.random.default_rng(4)
    n = 2000
    queue, stream = rng.integers(0, 3, n), rng.integers(0, 4, n)
    seq = np.arange(n) + rng.integers(-30, 30, n)  # mostly in order, some overtaking
    whole = OrderCheck().feed(queue, stream, seq)
    parts = OrderCheck()
    for lo in range(0, n, 137):
        parts.feed(queue[lo : lo + 137], stream[lo : lo + 137], seq[lo : lo + 137])
    assert parts.violations == whole > 0


def test_publish_sequence_orders_by_publish_then_intended_time() -> None:
    t_pub = np.array([0.3, np.nan, 0.1, 0.1])
    t_int = np.array([0.0, 0.2, 0.0, 0.0])
    assert list(publish_sequence(t_pub, t_int)) == [3, 2, 0, 1]  # ties by position


def test_acks_are_ordered_by_their_time_not_by_row() -> None:
    """Rows in any order: sorted by t_done (ties by t_deliver), messages 0 1 2 acked as 1 0 2."""
    got = order_violations(
        queue=np.zeros(3),
        stream=np.zeros(3),
        seq=np.array([2, 0, 1]),
        t_done=np.array([3.0, 2.0, 1.0]),
        t_deliver=np.zeros(3),
    )
    assert got == 1  # seq 0 at t=2 after seq 1 at t=1


def _messages(ids: list[str], producers: list[str]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "msg_id": m,
                "flow": "f",
                "queue": "q",
                "producer": p,
                "size_bytes": 10,
                "t_intended": float(i),
                "t_publish": float(i) + 0.001,
                "t_confirm": float(i) + 0.002,
                "replication": 0,
            }
            for i, (m, p) in enumerate(zip(ids, producers, strict=True))
        ],
        schema=MESSAGES,
    )


def _deliveries(rows: list[tuple[str, str, int, float, str]]) -> pa.Table:
    """(msg, queue, attempt, t_deliver, outcome); the handler takes 10 ms."""
    return pa.Table.from_pylist(
        [
            {
                "msg_id": m,
                "queue": q,
                "consumer": "c",
                "attempt": a,
                "t_deliver": t,
                "t_done": t + 0.01,
                "outcome": o,
                "redelivered": a > 1,
                "latency_s": 0.0,
                "replication": 0,
            }
            for m, q, a, t, o in rows
        ],
        schema=DELIVERIES,
    )


def test_ledger_counts_a_retried_message_overtaken_by_a_newer_one() -> None:
    """Out of order: a fails, b is acked while a waits out its timeout, a is acked after b.
    In order: a fails, holds the line, is acked, then b. Failed attempts are never checked."""
    m = _messages(["a", "b", "c"], ["p", "p", "p"])
    out_of_order = _deliveries(
        [
            ("a", "q", 1, 10.0, "timed_out"),
            ("b", "q", 1, 10.1, "acked"),
            ("a", "q", 2, 10.5, "acked"),
            ("c", "q", 1, 10.6, "acked"),
        ]
    )
    in_order = _deliveries(
        [
            ("a", "q", 1, 10.0, "timed_out"),
            ("a", "q", 2, 10.5, "acked"),
            ("b", "q", 1, 10.6, "acked"),
            ("c", "q", 1, 10.7, "acked"),
        ]
    )
    assert compute_ledger(m, out_of_order).order_violations == 1
    assert compute_ledger(m, in_order).order_violations == 0
    # the rows' order in the table does not matter, nor does another producer's stream
    assert compute_ledger(m, out_of_order.take([3, 2, 1, 0])).order_violations == 1
    other = _messages(["a", "b", "c"], ["p", "p2", "p"])
    assert compute_ledger(other, out_of_order).order_violations == 0  # b is another stream


def test_ledger_without_acks_or_with_unknown_ids_has_no_violation() -> None:
    m = _messages(["a", "b"], ["p", "p"])
    d = _deliveries([("zz", "q", 1, 1.0, "acked"), ("b", "q", 1, 2.0, "acked")])
    assert compute_ledger(m, d).order_violations == 0
    assert compute_ledger(m.slice(0, 0), d.slice(0, 0)) == Ledger()


SCENARIO = """
name: order
seed: 5
duration: 30s
broker: {{kind: {kind}}}
topology:
  queues:
    - {{name: q, visibility: {{timeout: 100ms, max_deliveries: 5, in_order: {in_order}}}}}
producers:
  - {{name: p, count: 2, queue: q, arrival: {{kind: poisson, rate: 10/s}}}}
consumers:
  - {{name: c, queue: q, count: {count}, prefetch: 10, failure_probability: 0.1,
     service_time: {{kind: exponential, mean: 5ms}}}}
"""


@pytest.mark.parametrize(("count", "kind"), [(1, "rabbitmq"), (2, "rabbitmq"), (2, "activemq")])
def test_simulated_in_order_queue_has_none_and_out_of_order_has_many(count: int, kind: str) -> None:
    """Same failures (p = 0.1, VT 100 ms, 2 × 10 msg/s): in order every retried message holds
    the line, so no violation; out of order nearly every retry is overtaken (about 50 in 60
    retries), and the in-order mean delivery time is the larger. On ActiveMQ's shipped profile
    (the threads model) a redelivery passes the dispatch stage again: the line waits for it."""
    means, counts = {}, {}
    profile = Profile.zero() if kind == "rabbitmq" else default_profile(kind)
    for in_order in (True, False):
        text = SCENARIO.format(in_order=str(in_order).lower(), count=count, kind=kind)
        s, issues = parse_scenario(text)
        assert s is not None, [str(i) for i in issues]
        res = Model(s, profile, 0).run()
        d = res.tables["deliveries"].to_pandas()
        counts[in_order] = res.ledger.order_violations
        means[in_order] = d[d.outcome == "acked"].latency_s.mean()
        assert res.ledger.redeliveries > 30
    assert counts[True] == 0
    assert counts[False] > 20
    assert means[True] > 2 * means[False]


def test_streamed_prediction_counts_violations_as_the_tables_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mqbed predict`'s streamed ledger (acks fed in the order they reach the broker, batch by
    batch) equals `compute_ledger` over the same tables (acks sorted by t_done) for a single
    consumer, whose acks reach the broker in the order it sends them."""
    s, _ = parse_scenario(SCENARIO.format(in_order="false", count=1, kind="rabbitmq"))
    assert s is not None
    ref = Model(s, Profile.zero(), 0).run()
    want = compute_ledger(ref.tables["messages"], ref.tables["deliveries"])
    monkeypatch.setattr(sim_recorder.Recorder.__init__, "__defaults__", (50,))  # many batches
    res = predict(s, tmp_path, replications=1, processes=1, profile=Profile.zero())
    assert res.ledgers[0].order_violations == want.order_violations > 20
