"""Per-replication summary figures, latency histograms/CDF/KS and the per-type table.

Expected values are computed here from the raw rows (plain Python / numpy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pyspark.sql import DataFrame, SparkSession

from testbed.analysis.latency import (
    BUCKETS_PER_DECADE,
    acked_in_load,
    bucket_upper_s,
    ks_distance,
    latency_cdf,
    latency_histogram,
    per_type_latency,
    queue_flows,
)
from testbed.analysis.metrics import per_type_from_queues, replication_metrics
from testbed.analysis.phases import LoadWindows, phase_bounds
from testbed.analysis.windows import window_metrics

from .frames import frame, phase_events

LOAD, DRAIN = 1.0, 3.0
# (msg_id, queue, flow, t_publish, t_deliver, t_done, outcome)
ROWS = [
    ("w0", "a", "A", 0.50, 0.60, 0.62, "acked"),  # published in warm-up
    ("x1", "a", "A", 1.10, 1.15, 1.20, "acked"),
    ("x2", "a", "B", 1.40, 1.70, 1.80, "acked"),
    ("x3", "b", "B", 2.00, 2.01, 2.02, "acked"),
    ("x4", "b", "B", 2.50, 2.90, 3.05, "acked"),  # done after the drain starts
    ("x5", "a", "A", 2.60, 2.65, 2.70, "dropped"),
    ("x6", "a", "A", 2.95, 3.20, 3.30, "acked"),  # published in load, done in drain
]
DEPTH = [(1.0, "a", 5), (2.0, "a", 1), (2.0, "b", 2), (3.0, "a", 3), (3.0, "b", 0), (4.0, "a", 9)]


def _inputs(spark: SparkSession) -> tuple[DataFrame, DataFrame, DataFrame, LoadWindows]:
    messages = frame(
        spark,
        "messages",
        [{"msg_id": m, "queue": q, "flow": f, "t_publish": p} for m, q, f, p, *_ in ROWS],
    )
    deliveries = frame(
        spark,
        "deliveries",
        [
            {
                "msg_id": m,
                "queue": q,
                "attempt": 1,
                "t_deliver": d,
                "t_done": done,
                "outcome": o,
                "latency_s": d - p,
            }
            for m, q, _, p, d, done, o in ROWS
        ],
    )
    timeseries = frame(
        spark,
        "timeseries",
        [{"t": t, "queue": q, "depth_ready": n, "depth_unacked": 0} for t, q, n in DEPTH],
    )
    events = frame(spark, "events", phase_events(LOAD, DRAIN))
    bounds = LoadWindows.collect(phase_bounds(events, messages, 0.0, 99.0))
    return messages, deliveries, timeseries, bounds


def test_replication_metrics_use_the_load_window_only(spark: SparkSession) -> None:
    messages, deliveries, timeseries, bounds = _inputs(spark)
    acked = acked_in_load(deliveries, bounds)
    got = {
        (r.queue, r.metric): r.value
        for r in replication_metrics(
            window_metrics(messages, deliveries, timeseries, bounds, 1.0),
            (deliveries, messages),
            acked,
            bounds,
        ).collect()
    }
    span = DRAIN - LOAD

    def done_in_load(queue: str | None) -> int:
        return sum(
            1
            for _, q, _, _, _, done, o in ROWS
            if o == "acked" and LOAD <= done < DRAIN and queue in (None, q)
        )

    def latencies(queue: str | None) -> np.ndarray:
        return np.array(
            [
                d - p
                for _, q, _, p, d, _, o in ROWS
                if o == "acked" and LOAD <= p < DRAIN and queue in (None, q)
            ]
        )

    for queue, key in ((None, "*"), ("a", "a"), ("b", "b")):
        assert got[(key, "throughput_msg_s")] == pytest.approx(done_in_load(queue) / span)
        lat = latencies(queue)
        assert got[(key, "latency_mean_s")] == pytest.approx(lat.mean())
        assert got[(key, "latency_p99_s")] == pytest.approx(
            np.quantile(lat, 0.99, method="inverted_cdf")
        )
    published = sum(1 for r in ROWS if LOAD <= r[3] < DRAIN)
    assert got[("*", "publish_rate_msg_s")] == pytest.approx(published / span)

    # depth: each copy is in its queue from publish to done (all settled), clipped to [1, 3)
    def area(queue: str | None) -> float:
        return sum(
            max(0.0, min(done, DRAIN) - max(p, LOAD))
            for _, q, _, p, _, done, _ in ROWS
            if queue in (None, q)
        )

    for queue, key in ((None, "*"), ("a", "a"), ("b", "b")):
        assert got[(key, "queue_depth_mean")] == pytest.approx(area(queue) / span)
    assert got[("a", "queue_depth_mean")] == pytest.approx((0.10 + 0.40 + 0.10 + 0.05) / span)


def test_depth_counts_redelivered_copies_until_settled_and_undelivered_ones_to_the_end(
    spark: SparkSession,
) -> None:
    # y1: timed out at 1.5, redelivered, acked at 2.0 -> in the queue 1.2..2.0
    # y2: crashed consumer, never settled -> 1.4..3.0 (the window's end)
    # y3: published at 2.5, never delivered -> 2.5..3.0; y4: acked before the window
    messages = frame(
        spark,
        "messages",
        [
            {"msg_id": m, "queue": "q", "flow": "A", "t_publish": p}
            for m, p in (("y1", 1.2), ("y2", 1.4), ("y3", 2.5), ("y4", 0.2))
        ],
    )
    rows = [
        ("y1", 1, 1.3, 1.5, "timed_out", 1.2),
        ("y1", 2, 1.9, 2.0, "acked", 1.2),
        ("y2", 1, 1.5, None, "crashed", 1.4),
        ("y4", 1, 0.3, 0.4, "acked", 0.2),
    ]
    deliveries = frame(
        spark,
        "deliveries",
        [
            {
                "msg_id": m,
                "queue": "q",
                "attempt": a,
                "t_deliver": d,
                "t_done": done,
                "outcome": o,
                "latency_s": d - p,
            }  # fmt: skip
            for m, a, d, done, o, p in rows
        ],
    )
    timeseries = frame(spark, "timeseries", [{"t": 2.0, "queue": "q", "depth_ready": 40}])
    bounds = LoadWindows.collect(phase_bounds(frame(spark, "events", phase_events(LOAD, DRAIN)),
                                              messages, 0.0, 99.0))  # fmt: skip
    got = {
        (r.queue, r.metric): r.value
        for r in replication_metrics(
            window_metrics(messages, deliveries, timeseries, bounds, 1.0),
            (deliveries, messages),
            acked_in_load(deliveries, bounds),
            bounds,
        ).collect()
    }
    expected = ((2.0 - 1.2) + (3.0 - 1.4) + (3.0 - 2.5)) / (DRAIN - LOAD)
    assert got[("q", "queue_depth_mean")] == pytest.approx(expected)
    assert got[("*", "queue_depth_mean")] == pytest.approx(expected)  # not the sampled 40


def test_histogram_buckets_and_ks_match_an_exact_computation(spark: SparkSession) -> None:
    # values far apart (factors > 1.1), so no two share a bucket and the bucketed KS is exact
    measured = [0.001, 0.002, 0.004, 0.008, 0.016]
    predicted = [0.0015, 0.003, 0.0035, 0.05]
    rows = [
        {
            "msg_id": f"{s}{i}",
            "queue": "q",
            "t_deliver": 1.5,
            "t_done": 1.6,
            "outcome": "acked",
            "latency_s": v,
            "source": s,
        }
        for s, values in (("measured", measured), ("predicted", predicted))
        for i, v in enumerate(values)
    ]
    deliveries = frame(spark, "deliveries", rows)
    bounds = LoadWindows.from_rows([(s, 0, 0.0, 10.0) for s in ("measured", "predicted")])
    hist = latency_histogram(acked_in_load(deliveries, bounds), 1.0)
    buckets = {(r.source, r.bucket): r.n for r in hist.where("queue = '*'").collect()}
    expected = {("measured", math.floor(math.log10(v) * BUCKETS_PER_DECADE)): 1 for v in measured}
    expected |= {
        ("predicted", math.floor(math.log10(v) * BUCKETS_PER_DECADE)): 1 for v in predicted
    }
    assert buckets == expected
    cdf = latency_cdf(hist)
    ks = {r.queue: r for r in ks_distance(cdf).collect()}
    grid = np.sort(np.concatenate([measured, predicted]))
    f_m = np.searchsorted(np.sort(measured), grid, side="right") / len(measured)
    f_p = np.searchsorted(np.sort(predicted), grid, side="right") / len(predicted)
    assert ks["*"].ks == pytest.approx(np.abs(f_m - f_p).max())
    assert (ks["*"].measured_n, ks["*"].predicted_n) == (5, 4)
    last = max(cdf.where("queue = '*'").collect(), key=lambda r: r.bucket)
    assert last.measured_cdf == last.predicted_cdf == 1.0
    assert last.upper_s == pytest.approx(bucket_upper_s(last.bucket))


def test_per_type_latency_joins_message_types(spark: SparkSession) -> None:
    messages, deliveries, _, bounds = _inputs(spark)
    extra = frame(
        spark,
        "deliveries",
        [
            {
                "msg_id": "ghost",
                "queue": "a",
                "t_deliver": 1.5,
                "t_done": 1.6,
                "outcome": "acked",
                "latency_s": 0.2,
            },
        ],
    )
    acked = acked_in_load(deliveries.unionByName(extra), bounds)
    got = {r.flow: r for r in per_type_latency(acked, messages).collect()}
    for flow in ("A", "B"):
        lat = np.array(
            [
                d - p
                for _, _, f, p, d, _, o in ROWS
                if f == flow and o == "acked" and LOAD <= p < DRAIN
            ]
        )
        assert got[flow].latency_count == len(lat)
        assert got[flow].latency_mean_s == pytest.approx(lat.mean())
    assert got["?"].latency_count == 1


def test_per_type_from_queues_matches_the_join_when_types_and_queues_correspond(
    spark: SparkSession,
) -> None:
    messages, deliveries, timeseries, bounds = _inputs(spark)
    one_type = messages.withColumn("flow", messages.queue)  # queue a → type a, b → b
    flows = {(r.queue, r.flows) for r in queue_flows(messages).collect()}
    assert flows == {("a", 2), ("b", 1)}  # the hand data: queue a carries A and B
    acked = acked_in_load(deliveries, bounds)
    joined = {r.flow: r.asDict() for r in per_type_latency(acked, one_type).collect()}
    windows = window_metrics(one_type, deliveries, timeseries, bounds, 1.0)
    metrics = replication_metrics(windows, (deliveries, messages), acked, bounds)
    derived = {
        r.flow: r.asDict() for r in per_type_from_queues(metrics, queue_flows(one_type)).collect()
    }
    assert set(joined) == {"a", "b"} and set(derived) == set(joined)
    for flow, row in joined.items():
        for key, value in row.items():
            assert derived[flow][key] == (
                pytest.approx(value) if isinstance(value, float) else value
            ), (flow, key)
