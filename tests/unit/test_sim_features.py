"""Simulator behaviours beyond the closed forms: calibration consistency, routing and fan-out,
visibility timeout and dead-lettering, in-order queues, ack modes, flow control, chains."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from emulator.sim.model import Model, SimResult
from testbed.core.profile import Profile, default_profile
from testbed.core.quantiles import ks_to_sample
from testbed.core.scenario_loader import parse_scenario


def scenario(text: str) -> Any:
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    return s


def run(text: str, profile: Profile | None = None, rep: int = 0) -> SimResult:
    return Model(scenario(text), profile or Profile.zero(), rep).run()


def frames(res: SimResult) -> tuple[Any, Any, Any]:
    t = res.tables
    return t["messages"].to_pandas(), t["deliveries"].to_pandas(), t["timeseries"].to_pandas()


BASE = """
name: feat
seed: 3
duration: {duration}s
{broker}
topology:
{topology}
producers:
{producers}
consumers:
{consumers}
"""


def text(
    producers: str,
    consumers: str,
    topology: str = "  queues: [{name: q}]",
    duration: float = 20,
    broker: str = "",
) -> str:
    return BASE.format(
        duration=duration,
        broker=broker,
        topology=topology,
        producers=producers,
        consumers=consumers,
    )


def test_light_load_latency_and_confirm_reproduce_the_profile() -> None:
    """amqp at light load, a profile without a client path: latency = L_base(size) spread by
    the fit's sd; confirm time = calibrated write time (§9)."""
    prof = default_profile("rabbitmq").model_copy(update={"client_path": None})
    res = run(
        text(
            "  - {name: p, queue: q, confirms: true, size: 200B, arrival: {kind: poisson, rate: 1/s}}",
            "  - {name: c, queue: q, count: 1, prefetch: 10}",
            duration=600,
        ),
        prof,
    )
    m, d, _ = frames(res)
    fit = prof.base_latency(1.0)
    assert fit.rate == 1.0  # the low-load variant for a 1 msg/s queue
    expected = fit.a + fit.b * 200 + prof.confirm_overhead.at(200)
    lat = d.latency_s.to_numpy()
    assert abs(lat.mean() - expected) < 5 * fit.sd / math.sqrt(len(lat))  # zero-mean spread
    assert lat.std() == pytest.approx(fit.sd, rel=0.2)
    assert lat.min() >= 2 * prof.network_delay
    confirm = (m.t_confirm - m.t_publish).to_numpy()
    se = prof.write_time.sd / math.sqrt(len(confirm))
    assert abs(confirm.mean() - prof.write_time.mean) < 5 * se


def test_light_load_latency_follows_the_measured_client_path() -> None:
    """With the shipped client path: the light-load latency distribution is the measured
    delivery table at that point (the modelled stages are taken out and added back) — plus,
    at 5 msg/s, where the machine sits idle ~200 ms before a publish, its measured wake-up."""
    prof = default_profile("rabbitmq")
    cp = prof.client_path
    assert cp is not None and cp.wake
    scenario = text(
        "  - {name: p, queue: q, size: 200B, arrival: {kind: poisson, rate: 5/s}}",
        "  - {name: c, queue: q, count: 1, prefetch: 10, service_time: "
        "{kind: deterministic, value: 0ms}}",
        duration=600,
    )
    asleep = prof.model_copy(update={"client_path": cp.model_copy(update={"wake": []})})
    _, d, _ = frames(run(scenario, asleep))
    table = cp.delivery_table(5.0, 200, False, 0.0)
    lat = d.latency_s.to_numpy()
    assert ks_to_sample(table, lat) < 0.05, ks_to_sample(table, lat)
    assert lat.min() >= table.floor * 0.999
    _, woken, _ = frames(run(scenario, prof))
    shift = np.median(woken.latency_s.to_numpy()) - np.median(lat)
    assert cp.wake_delay(0.02) < shift <= cp.wake_delay(10.0) + 1e-6, shift


def test_fanout_copies_and_per_destination_routing_cost() -> None:
    prof = Profile.zero(routing={"per_destination": 0.001})
    topo = """  exchanges: [{name: x, type: fanout}]
  queues:
    - {name: a, bindings: [{exchange: x}]}
    - {name: b, bindings: [{exchange: x}]}
    - {name: c, bindings: [{exchange: x}]}"""
    res = run(
        text(
            "  - {name: p, exchange: x, confirms: true, arrival: {kind: poisson, rate: 5/s}}",
            "\n".join(f"  - {{name: c{q}, queue: {q}, count: 1}}" for q in "abc"),
            topology=topo,
        ),
        prof,
    )
    m, d, _ = frames(res)
    assert (d.groupby("msg_id").queue.nunique() == 3).all()
    assert len(d) == 3 * len(m)
    # two extra destinations, 1 ms each, on the broker's one routing stage: a publish within
    # 2 ms of the one before waits for it (Poisson 5/s draws such a pair now and then)
    m = m.sort_values("t_publish")
    start = np.maximum(m.t_publish.to_numpy()[1:], m.t_confirm.to_numpy()[:-1])
    assert np.allclose(m.t_confirm.to_numpy()[1:] - start, 0.002)
    assert (m.t_confirm - m.t_publish).min() == pytest.approx(0.002)
    assert res.ledger.duplicated == 0 and res.ledger.lost == 0


def test_topic_routing_with_a_list_of_keys() -> None:
    topo = """  exchanges: [{name: alarms, type: topic}]
  queues:
    - {name: fr, bindings: [{exchange: alarms, key: "Alarm.FR"}]}
    - {name: all, bindings: [{exchange: alarms, key: "Alarm.#"}]}"""
    res = run(
        text(
            '  - {name: p, exchange: alarms, routing_key: ["Alarm.FR", "Alarm.DE"], '
            "arrival: {kind: poisson, rate: 50/s}}",
            "  - {name: cf, queue: fr, count: 1}\n  - {name: ca, queue: all, count: 1}",
            topology=topo,
        )
    )
    m, d, _ = frames(res)
    per_queue = d.groupby("queue").msg_id.nunique()
    assert per_queue["all"] == len(m)
    assert 0.4 < per_queue["fr"] / len(m) < 0.6


def test_visibility_timeout_redelivers_then_dead_letters() -> None:
    topo = "  queues:\n    - {name: q, visibility: {timeout: 0.05s, max_deliveries: 2}}"
    res = run(
        text(
            "  - {name: p, queue: q, arrival: {kind: poisson, rate: 100/s}}",
            "  - {name: c, queue: q, count: 2, prefetch: 0, failure_probability: 0.5}",
            topology=topo,
            duration=60,
        )
    )
    m, d, ts = frames(res)
    n = len(m)
    dead = int((d.outcome == "dead_lettered").sum())
    assert abs(dead / n - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n)
    assert res.ledger.dead_lettered == dead
    assert res.ledger.redeliveries == int((d.attempt == 2).sum())
    first = d[d.attempt == 1].set_index("msg_id")
    second = d[d.attempt == 2].set_index("msg_id")
    gap = second.t_deliver - first.loc[second.index].t_deliver
    assert np.allclose(gap, 0.05)  # VT counts from the dispatch of the failed attempt
    assert "q.dlq" in set(ts.queue)
    assert ts[ts.queue == "q.dlq"].depth_ready.iloc[-1] == dead


def test_in_order_queue_keeps_one_message_in_flight() -> None:
    topo = "  queues:\n    - {name: q, visibility: {timeout: 0.05s, in_order: true}}"
    res = run(
        text(
            "  - {name: p, queue: q, arrival: {kind: poisson, rate: 20/s}}",
            "  - {name: c, queue: q, count: 3, prefetch: 5, failure_probability: 0.2,"
            " service_time: {kind: exponential, mean: 5ms}}",
            topology=topo,
        )
    )
    m, d, ts = frames(res)
    assert ts.depth_unacked.max() <= 1
    acked = d[d.outcome == "acked"].sort_values("t_deliver")
    assert list(acked.msg_id.astype(int)) == sorted(acked.msg_id.astype(int))


@pytest.mark.parametrize("ack", ["auto", "after_receive"])
def test_failures_lose_messages_when_acked_before_processing(ack: str) -> None:
    res = run(
        text(
            "  - {name: p, queue: q, confirms: true, arrival: {kind: poisson, rate: 100/s}}",
            f"  - {{name: c, queue: q, count: 1, ack: {ack}, failure_probability: 0.1}}",
        )
    )
    m, d, _ = frames(res)
    assert res.ledger.lost == int((d.outcome == "dropped").sum()) > 0
    assert res.ledger.redeliveries == 0


def test_failure_without_visibility_timeout_is_nacked_and_requeued_at_once() -> None:
    """Like the live consumer (nack with requeue): nothing is lost, each failure is one
    redelivery, the failed attempt takes no service time, and the run drains."""
    s = text(
        "  - {name: p, queue: q, arrival: {kind: poisson, rate: 50/s}}",
        "  - {name: c, queue: q, count: 1, prefetch: 1, failure_probability: 0.2,"
        " service_time: {kind: deterministic, value: 4ms}}",
    ).replace("duration: 20s", "duration: 20s\ndrain_timeout: 5s")
    res = run(s)
    _, d, _ = frames(res)
    nacked = d[d.outcome == "nacked"]
    assert len(nacked) > 0 and res.ledger.lost == 0
    assert res.ledger.redeliveries == len(nacked)
    assert (nacked.t_done - nacked.t_deliver < 0.004).all()  # dropped before service
    assert res.sim_end < 25.0  # drained before drain_timeout


def test_slow_consumer_times_out_and_the_copy_is_redelivered() -> None:
    topo = "  queues:\n    - {name: q, visibility: {timeout: 0.02s, max_deliveries: 100}}"
    res = run(
        text(
            "  - {name: p, queue: q, arrival: {kind: poisson, rate: 5/s}}",
            "  - {name: c, queue: q, count: 2, prefetch: 1,"
            " service_time: {kind: exponential, mean: 15ms}}",
            topology=topo,
        )
    )
    _, d, _ = frames(res)
    assert (d.outcome == "timed_out").any()
    slow = d.t_done - d.t_deliver > 0.02  # dispatch ≤ handler start, so these must time out
    assert (d[slow].outcome == "timed_out").all()
    assert (d[d.outcome == "acked"].t_done - d[d.outcome == "acked"].t_deliver <= 0.02).all()
    assert res.ledger.delivered_unique == res.ledger.sent


def test_memory_flow_control_blocks_publishers() -> None:
    s = text(
        "  - {name: p, queue: q, size: 1KB, arrival: {kind: constant, rate: 1000/s}}",
        "  - {name: c, queue: q, count: 1, start: 5s, service_time: 0.5ms}",
        broker="broker: {memory_limit: 100KB}",
        duration=10,
    ).replace("seed: 3", "seed: 3\noverload: true")
    res = run(s)
    m, _, ts = frames(res)
    assert ts.producers_blocked.max() == 1
    assert ts.memory_bytes.max() <= 100_000 + 1000
    delay = (m.t_publish - m.t_intended).to_numpy()
    assert delay.max() > 4.0  # blocked until the consumer starts at 5 s
    assert res.ledger.delivered_unique == res.ledger.sent


def test_follow_up_chain_publishes_typed_messages_from_the_consumer() -> None:
    topo = "  queues: [{name: orders}, {name: confirms}]"
    res = run(
        text(
            "  - {name: sm, queue: orders, message_type: Order, arrival: {kind: poisson, rate: 50/s}}",
            "  - {name: dc, queue: orders, count: 2, service_time: 1ms,"
            ' follow_ups: [{"on": Order, message_type: OrderConf, queue: confirms, probability: 0.5}]}\n'
            "  - {name: smc, queue: confirms, count: 1}",
            topology=topo,
            duration=60,
        )
    )
    m, d, _ = frames(res)
    conf = m[m.flow == "OrderConf"]
    orders = m[m.flow == "Order"]
    assert abs(len(conf) / len(orders) - 0.5) < 5 * math.sqrt(0.25 / len(orders))
    assert set(conf.producer) <= {"dc-0", "dc-1"}
    assert (conf.t_intended == conf.t_publish).all()
    assert set(d[d.queue == "confirms"].msg_id) == set(conf.msg_id)


def test_producer_start_stop_and_max_messages() -> None:
    res = run(
        text(
            "  - {name: a, queue: q, start: 2s, stop: 5s, arrival: {kind: constant, rate: 10/s}}\n"
            "  - {name: b, queue: q, max_messages: 7, arrival: {kind: poisson, rate: 100/s}}",
            "  - {name: c, queue: q, count: 1}",
        )
    )
    m, _, _ = frames(res)
    a = m[m.producer == "a-0"]
    assert len(a) == 30 and a.t_intended.min() >= 2 and a.t_intended.max() < 5
    assert (m.producer == "b-0").sum() == 7


def test_phases_timeseries_and_drain() -> None:
    s = text(
        "  - {name: p, queue: q, arrival: {kind: mmpp, rates: [200, 20], mean_sojourns: [1s, 1s]}}\n"
        "  - {name: r, queue: q, arrival: {kind: ramp, from: 0, to: 100, over: 10s}}",
        "  - {name: c, queue: q, count: 2, service_time: {kind: exponential, mean: 1ms}}",
    ).replace("seed: 3", "seed: 3\nwarmup: 2s")
    res = run(s)
    ev = res.tables["events"].to_pandas()
    phases = [(t, json.loads(x)["phase"]) for t, x in zip(ev.t, ev.detail, strict=True)]
    assert phases == [(0.0, "warmup"), (2.0, "load"), (20.0, "drain")]
    ts = res.tables["timeseries"].to_pandas()
    assert list(ts.t) == [float(i) for i in range(1, len(ts) + 1)]
    assert ts.publish_rate.sum() == res.ledger.sent
    assert 20.0 <= res.sim_end <= 21.0  # drained within a sampling window


def test_ledger_from_hand_built_tables() -> None:
    """The ledger definition on string ids: duplicates per queue, fan-out, unexpected, ..."""
    import pyarrow as pa

    from testbed.core.ledger import compute_ledger
    from testbed.core.records import DELIVERIES, MESSAGES

    nan = None
    messages = pa.Table.from_pylist(
        [
            {
                "msg_id": i,
                "flow": "f",
                "queue": "x",
                "producer": "p",
                "size_bytes": 1,
                "t_intended": 0.0,
                "t_publish": 0.0,
                "t_confirm": c,
                "replication": 0,
            }
            for i, c in [("a", 1.0), ("b", 1.0), ("c", nan), ("d", 1.0), ("e", nan)]
        ],
        schema=MESSAGES,
    )
    rows = [  # (msg, queue, outcome, redelivered)
        ("a", "q1", "acked", False),
        ("a", "q2", "acked", False),  # fan-out: not a duplicate
        ("b", "q1", "timed_out", False),
        ("b", "q1", "acked", True),
        ("b", "q1", "acked", True),
        ("c", "q1", "acked", False),  # unconfirmed but delivered: recovered
        ("d", "q1", "dead_lettered", False),  # confirmed, dead-lettered: not lost
        ("zz", "q1", "acked", False),  # never published: unexpected
    ]
    deliveries = pa.Table.from_pylist(
        [
            {
                "msg_id": m,
                "queue": q,
                "consumer": "c",
                "attempt": 1,
                "t_deliver": 0.0,
                "t_done": 0.0,
                "outcome": o,
                "redelivered": r,
                "latency_s": 0.0,
                "replication": 0,
            }
            for m, q, o, r in rows
        ],
        schema=DELIVERIES,
    )
    lg = compute_ledger(messages, deliveries)
    assert lg.to_json() == {
        "sent": 5,
        "confirmed": 3,
        "delivered_unique": 3,  # a, b, c (zz is unexpected, not delivered)
        "lost": 0,
        "duplicated": 1,
        "unexpected": 1,
        "recovered": 1,
        "redeliveries": 2,
        "dead_lettered": 1,
        "unroutable": 0,
        "order_violations": 0,  # q1 acks a, b, b, c: never one older than one acked before
    }
