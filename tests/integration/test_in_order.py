"""In-order delivery on real brokers (``visibility.in_order``, docs/models.md §4). What a broken
implementation gets wrong, asserted here:

- a second consumer of the queue receives too (no single active / exclusive consumer), or a
  consumer gets a newer message while an older one is unacked (prefetch above 1);
- a requeued message does not come back first, or the standby consumer does not take over,
  in order, when the active one goes;
- through the whole pipeline: a failed message does not hold the line until its lease runs
  out (newer ones overtake it: order violations, or a redelivery sooner than VT), attempt
  numbers restart, messages go missing, in-order is not slower than out-of-order under the
  same failures, or the failed attempts are not the ones the predicted twin fails.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from testbed.backends.local import LocalBackend
from testbed.brokers import BrokerAdapter, Consumer, Delivery, QueueDecl
from testbed.core.ledger import compute_ledger
from testbed.core.seeds import failure_uniform, replication_seed
from tests.integration.live import adapters, run_quietly

pytestmark = pytest.mark.integration

FLAVOURS = {
    "rabbitmq-pika": ("rabbitmq", "pika"),
    "rabbitmq-kombu": ("rabbitmq", "kombu"),
    "activemq-stomp": ("activemq", "stomp"),
}


@pytest.fixture(params=list(FLAVOURS))
def make(request: pytest.FixtureRequest) -> Iterator[Callable[[], BrokerAdapter]]:
    yield from adapters(request, *FLAVOURS[str(request.param)])


def _take(c: Consumer, seconds: float = 1.0) -> list[Delivery]:
    """What `c` receives within `seconds` (it stops early once something came and 0.3 s of
    quiet followed)."""
    got: list[Delivery] = []
    quiet = 0
    for _ in range(int(seconds / 0.1)):
        batch = c.drain(0.1)
        got += batch
        quiet = 0 if batch else quiet + 1
        if got and quiet >= 3:
            break
    return got


def test_one_active_consumer_holds_the_line_and_hands_over_in_order(
    make: Callable[[], BrokerAdapter],
) -> None:
    """Two consumers with prefetch 1 on a single-active-consumer queue, five messages: the
    first consumer gets m0 alone and nothing more while m0 is unacked; the other gets nothing.
    Requeued (RabbitMQ), m0 comes back first. When the active consumer closes with m2 unacked,
    the standby one takes over with m2, then m3 and m4."""
    name = f"io.{uuid.uuid4().hex[:8]}"
    decl = QueueDecl(name, durable=False, single_active_consumer=True)
    a_side, b_side, p_side = make(), make(), make()
    for side in (a_side, b_side, p_side):
        side.declare([decl])  # ActiveMQ: where a consumer runs, so it subscribes exclusive
    a = a_side.consumer(name, prefetch=1, ack_mode="manual")
    b = b_side.consumer(name, prefetch=1, ack_mode="manual")
    p = p_side.producer(name)
    for i in range(5):
        p.publish(b"x", msg_id=f"m{i}")

    first = _take(a)
    assert [d.msg_id for d in first] == ["m0"] and _take(b, 0.5) == []
    if a_side.capabilities.nack_requeue:
        first[0].nack(requeue=True)
        again = _take(a)
        assert [d.msg_id for d in again] == ["m0"] and again[0].redelivered
        first = again
    first[0].ack()
    second = _take(a)
    assert [d.msg_id for d in second] == ["m1"]
    second[0].ack()
    assert [d.msg_id for d in _take(a)] == ["m2"]  # held unacked: the line waits
    a.close()  # gives m2 back; the standby consumer becomes the active one
    order: list[str] = []
    for _ in range(3):
        got = _take(b, 3.0)
        assert len(got) == 1, [d.msg_id for d in got]  # prefetch 1: one at a time
        order.append(got[0].msg_id)
        got[0].ack()
    assert order == ["m2", "m3", "m4"]


SCENARIO = """
name: in-order-{kind}
seed: 23
duration: 15s
warmup: 2s
drain_timeout: 20s
broker: {{kind: {kind}}}
topology:
  queues:
    - {{name: {ordered}, visibility: {{timeout: 200ms, max_deliveries: 5, in_order: true}}}}
    - {{name: {loose}, visibility: {{timeout: 200ms, max_deliveries: 5}}}}
producers:
  - {{name: po, queue: {ordered}, arrival: {{kind: poisson, rate: 20/s}}, confirms: true}}
  - {{name: pl, queue: {loose}, arrival: {{kind: poisson, rate: 20/s}}, confirms: true}}
consumers:
  - {{name: co, queue: {ordered}, count: 2, prefetch: 20, failure_probability: 0.1,
     service_time: {{kind: exponential, mean: 5ms}}}}
  - {{name: cl, queue: {loose}, count: 2, prefetch: 20, failure_probability: 0.1,
     service_time: {{kind: exponential, mean: 5ms}}}}
"""


def _queue_ledger(m: pa.Table, d: pa.Table, queue: str) -> dict[str, int]:
    """The ledger of one queue's messages and deliveries (each producer feeds one queue)."""
    mq = m.filter(pc.equal(m["queue"], queue))
    dq = d.filter(pc.equal(d["queue"], queue))
    return compute_ledger(mq, dq).to_json()


def _check_in_order_queue(d: pd.DataFrame, vt: float) -> None:
    """Nothing else is delivered on the queue between a failed attempt and its redelivery,
    which comes at least VT later with the next attempt number; one consumer did it all."""
    d = d.sort_values("t_deliver").reset_index(drop=True)
    failed = d.index[d.outcome == "timed_out"]
    assert len(failed) > 5, d.outcome.value_counts()
    for i in failed:
        nxt = d.loc[i + 1]
        assert nxt.msg_id == d.loc[i].msg_id, d.loc[i - 1 : i + 2].to_dict("records")
        assert nxt.attempt == d.loc[i].attempt + 1 and nxt.redelivered
        assert nxt.t_deliver - d.loc[i].t_deliver >= vt - 0.005
    assert d[d.outcome == "acked"].consumer.nunique() == 1  # the standby never received


def _check_keyed_failures(d: pd.DataFrame, seed: int, p: float) -> None:
    """The consumers failed the attempts `failure_uniform` names (what the predicted twin
    fails, tests/unit/test_keyed_failures.py): no attempt whose uniform is below p was acked,
    and the failed ones are those (a lease that ran out during service, rare at 5 ms against
    200 ms, is the other way to time out)."""
    key = d.msg_id.str.split(".", n=2).str[2]  # the id without the run's token and replication
    group = d.consumer.str.split(".").str[0]
    u = pd.Series(
        [
            failure_uniform(seed, g, k, int(a))
            for g, k, a in zip(group, key, d.attempt, strict=True)
        ],
        index=d.index,
    )
    acked, failed = d.outcome == "acked", d.outcome.isin(["timed_out", "dead_lettered"])
    assert (u[acked] >= p).all(), d[acked & (u < p)].head().to_dict("records")
    assert failed.sum() > 10 and (u[failed] < p).mean() >= 0.95, (u[failed] >= p).sum()


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_in_order_queue_keeps_order_under_failures_and_is_slower(
    tmp_path: Path, local_backend: LocalBackend, kind: str, request: pytest.FixtureRequest
) -> None:
    """One run, two queues under the same failures (p = 0.1, VT 200 ms, 20 msg/s, two
    consumers each): the in-order queue has no order violation, its failed messages hold the
    line, every message is delivered or dead-lettered, and its mean delivery time is well
    above the out-of-order queue's, which has violations."""
    request.getfixturevalue(kind)  # the session broker
    tag = uuid.uuid4().hex[:6]  # fresh names: an earlier run's queue has other arguments
    ordered, loose = f"ordered.{tag}", f"loose.{tag}"
    text = SCENARIO.format(kind=kind, ordered=ordered, loose=loose)
    run_dir = run_quietly(text, tmp_path, local_backend.home)
    m = pq.read_table(run_dir / "measured" / "messages.parquet")
    d = pq.read_table(run_dir / "measured" / "deliveries.parquet")
    ledger = json.loads((run_dir / "measured" / "ledger.json").read_text())
    io, oo = _queue_ledger(m, d, ordered), _queue_ledger(m, d, loose)
    deliveries = d.to_pandas()
    figures = {}
    for name, q, led in (("in order", ordered, io), ("out of order", loose, oo)):
        dq = deliveries[deliveries.queue == q]
        acked = dq[dq.outcome == "acked"]
        figures[name] = {
            "mean_delivery_s": round(float(acked.latency_s.mean()), 4),
            "redeliveries": led["redeliveries"],
            "order_violations": led["order_violations"],
            "sent": led["sent"],
        }
        assert led["sent"] > 200, figures
        assert led["lost"] == led["duplicated"] == led["unexpected"] == 0, (name, led)
        assert led["delivered_unique"] + led["dead_lettered"] == led["sent"], (name, led)
        assert led["redeliveries"] > 0, (name, led)
    print(json.dumps(figures))  # the measured figures, for the record (-s)
    assert io["order_violations"] == 0, figures
    assert oo["order_violations"] > 0, figures
    assert ledger["order_violations"] == oo["order_violations"]  # the run's ledger has both
    _check_in_order_queue(deliveries[deliveries.queue == ordered], 0.2)
    _check_keyed_failures(deliveries, replication_seed(23, 0), 0.1)
    loose_acked = deliveries[(deliveries.queue == loose) & (deliveries.outcome == "acked")]
    assert loose_acked.consumer.nunique() == 2  # out of order both consumers serve
    assert figures["in order"]["mean_delivery_s"] > 2 * figures["out of order"]["mean_delivery_s"]
