"""Load-window bounds, window labels and the per-window frame, on hand-built records.

Expected numbers are counted here from the raw rows with plain Python, never read back from
the transform's output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession

from testbed.analysis.phases import LoadWindows, label_windows, phase_bounds
from testbed.analysis.windows import PERCENTILE_ACCURACY, window_metrics

from .frames import frame, phase_events

MESSAGES = [  # (msg_id, queue, t_publish)
    ("m1", "a", 0.10),
    ("m2", "a", 0.50),
    ("m3", "a", 1.20),
    ("m4", "b", 0.70),
    ("m5", "a", 2.40),
]
DELIVERIES = [  # (msg_id, queue, attempt, t_deliver, t_done, outcome, latency_s)
    ("m1", "a", 1, 0.20, 0.30, "acked", 0.10),
    ("m2", "a", 1, 0.90, 1.10, "acked", 0.40),
    ("m3", "a", 1, 1.30, 1.35, "nacked", 0.10),
    ("m3", "a", 2, 1.60, 1.70, "acked", 0.40),
    ("m4", "b", 1, 0.80, 0.85, "acked", 0.10),
    ("m5", "a", 1, 2.45, 2.50, "acked", 0.05),
]
TIMESERIES = [  # (t, queue, ready, unacked, consumers, blocked)
    (0.5, "a", 2, 1, 1, 0),
    (1.5, "a", 0, 1, 1, 0),
    (1.9, "a", 4, 1, 2, 1),
    (0.5, "b", 4, 0, 2, 0),
    (-0.5, "a", 9, 9, 9, 9),  # before the workload start: dropped
]


def _frames(spark: SparkSession) -> dict[str, Any]:
    return {
        "messages": frame(
            spark, "messages", [{"msg_id": m, "queue": q, "t_publish": t} for m, q, t in MESSAGES]
        ),
        "deliveries": frame(
            spark,
            "deliveries",
            [
                {
                    "msg_id": m,
                    "queue": q,
                    "attempt": a,
                    "t_deliver": d,
                    "t_done": done,
                    "outcome": o,
                    "latency_s": lat,
                }
                for m, q, a, d, done, o, lat in DELIVERIES
            ],
        ),
        "timeseries": frame(
            spark,
            "timeseries",
            [
                {
                    "t": t,
                    "queue": q,
                    "depth_ready": r,
                    "depth_unacked": u,
                    "consumers": c,
                    "producers_blocked": b,
                }
                for t, q, r, u, c, b in TIMESERIES
            ],
        ),
        "events": frame(spark, "events", phase_events(1.0, 2.0)),
    }


def test_phase_bounds_reads_load_and_drain_and_defaults_the_rest(spark: SparkSession) -> None:
    events = frame(spark, "events", phase_events(2.0, 12.0))
    keys = frame(
        spark,
        "messages",
        [{"msg_id": "x"}, {"msg_id": "y", "source": "predicted", "replication": 1}],
    )
    got = {
        (r.source, r.replication): (r.load_start, r.load_end)
        for r in phase_bounds(events, keys, 1.5, 9.0).collect()
    }
    assert got == {("measured", 0): (2.0, 12.0), ("predicted", 1): (1.5, 9.0)}


@pytest.mark.parametrize(
    ("load", "drain", "phases"),
    [
        (1.0, 3.0, ["warmup", "load", "load", "drain"]),
        (1.5, 3.5, ["warmup", "warmup", "load", "drain"]),  # windows cut by a boundary
    ],
)
def test_label_windows_counts_only_whole_windows_as_load(
    spark: SparkSession, load: float, drain: float, phases: list[str]
) -> None:
    bounds = LoadWindows.from_rows([("measured", 0, load, drain)])
    windows = spark.createDataFrame(
        [("r", "measured", 0, k) for k in range(4)],
        "run_id string, source string, replication int, window long",
    )
    rows = sorted(label_windows(windows, bounds, 1.0).collect(), key=lambda r: r.window)
    assert [r.phase for r in rows] == phases
    assert [r.t_start for r in rows] == [0.0, 1.0, 2.0, 3.0]


def _expected() -> dict[tuple[str, int], dict[str, Any]]:
    """Per (queue, window) figures counted from the raw lists; queue '*' pools a and b."""
    out: dict[tuple[str, int], dict[str, Any]] = {}

    def cell(queue: str, window: int) -> dict[str, Any]:
        return out.setdefault(
            (queue, window),
            {"publish": 0, "deliver": 0, "ack": 0, "lat": [], "ts": []},
        )

    for _, q, t in MESSAGES:
        for key in (q, "*"):
            cell(key, math.floor(t))["publish"] += 1
    for _, q, _, d, done, o, lat in DELIVERIES:
        for key in (q, "*"):
            cell(key, math.floor(d))["deliver"] += 1
            if o == "acked":
                cell(key, math.floor(done))["ack"] += 1
                cell(key, math.floor(d - lat))["lat"].append(lat)
    for t, q, r, u, c, b in TIMESERIES:
        if t >= 0:
            cell(q, math.floor(t))["ts"].append((r, u, c, b))
    return out


def test_window_metrics_counts_rates_latencies_and_depths(spark: SparkSession) -> None:
    f = _frames(spark)
    keys = f["messages"]
    bounds = LoadWindows.collect(phase_bounds(f["events"], keys, 0.0, 99.0))
    got = {
        (r.queue, r.window): r
        for r in window_metrics(
            f["messages"], f["deliveries"], f["timeseries"], bounds, 1.0
        ).collect()
    }
    expected = _expected()
    assert set(got) == set(expected) | {("*", 0), ("*", 1)}
    for (queue, window), e in expected.items():
        row = got[(queue, window)]
        assert row.publish_rate == e["publish"], (queue, window)
        assert row.deliver_rate == e["deliver"], (queue, window)
        assert row.ack_rate == e["ack"], (queue, window)
        assert row.latency_count == len(e["lat"])
        if e["lat"]:
            lat = np.array(e["lat"])
            assert row.latency_mean_s == pytest.approx(lat.mean())
            for q, name in ((0.5, "latency_p50_s"), (0.95, "latency_p95_s")):
                assert getattr(row, name) == pytest.approx(
                    np.quantile(lat, q, method="inverted_cdf")
                )
        else:
            assert row.latency_mean_s is None
        if e["ts"]:
            ts = np.array(e["ts"], dtype=float)
            assert row.depth_ready == pytest.approx(ts[:, 0].mean())
            assert row.queue_depth == pytest.approx(ts[:, 0].mean() + ts[:, 1].mean())
            assert row.consumers == pytest.approx(ts[:, 2].mean())
    # the whole run's depth is the sum of the queues' window means: window 0 is a(3) + b(4)
    assert got[("*", 0)].queue_depth == pytest.approx(3.0 + 4.0)
    assert got[("*", 1)].queue_depth == pytest.approx((1 + 5) / 2)
    assert [got[("a", k)].phase for k in (0, 1, 2)] == ["warmup", "load", "drain"]
    assert PERCENTILE_ACCURACY == 10_000


def test_load_windows_filter_rows_by_source_and_replication(spark: SparkSession) -> None:
    load = LoadWindows.from_rows([("measured", 0, 1.0, 3.0), ("predicted", 1, 2.0, 4.0)])
    rows = (
        [("measured", 0, t) for t in (0.5, 1.0, 2.9, 3.0)]
        + [("predicted", 1, t) for t in (1.0, 2.0, 4.0)]
        + [("predicted", 0, 2.5)]
    )  # a replication without a window: never inside
    frame = spark.createDataFrame(rows, "source string, replication int, t double")
    got = [
        (r.source, r.t, r.inside, r.closed)
        for r in frame.select(
            "source",
            "t",
            load.contains(frame.t).alias("inside"),
            load.contains(frame.t, right_closed=True).alias("closed"),
        ).collect()
    ]
    assert got == [
        ("measured", 0.5, False, False),
        ("measured", 1.0, True, False),
        ("measured", 2.9, True, True),
        ("measured", 3.0, False, True),
        ("predicted", 1.0, False, False),
        ("predicted", 2.0, True, False),
        ("predicted", 4.0, False, True),
        ("predicted", 2.5, False, False),
    ]
    assert load.replications("predicted") == [1]


def test_the_simulator_and_spark_cut_the_same_window_from_the_same_rows(
    spark: SparkSession,
) -> None:
    """One rule (`testbed.core.phases.load_window`: the earliest ``load`` and ``drain``): the
    simulator's summary calls it, Spark's `phase_bounds` writes it as a ``min``; the same rows
    give both the same window, also with repeated phase events out of time order."""
    import pandas as pd

    from emulator.sim.summary import load_window as simulated_window
    from testbed.core.phases import load_window

    fault = {"t": 3.0, "kind": "fault_start", "target": "broker", "detail": '{"phase": "load"}'}
    runs = {
        0: phase_events(2.0, 12.0, replication=0),  # a normal run: one of each
        1: [  # merged twice, the second copy shifted and written first
            *phase_events(4.0, 14.0, replication=1),
            *phase_events(2.5, 11.5, replication=1),
        ][::-1],
        2: [fault | {"replication": 2}, *phase_events(1.0, 9.0, replication=2)],
    }
    rows = [row for rs in runs.values() for row in rs]
    keys = frame(spark, "messages", [{"msg_id": f"m{r}", "replication": r} for r in runs])
    spark_says = {
        r.replication: (r.load_start, r.load_end)
        for r in phase_bounds(frame(spark, "events", rows), keys, 0.0, 99.0).collect()
    }
    sim_says = {r: simulated_window(pd.DataFrame(rs)) for r, rs in runs.items()}
    assert spark_says == sim_says == {0: (2.0, 12.0), 1: (2.5, 11.5), 2: (1.0, 9.0)}
    marks = [(0.0, "warmup"), (7.0, "drain"), (5.0, "load"), (3.0, "drain")]
    assert load_window(marks) == (5.0, 3.0)  # the rule, even for nonsense: the earliest of each
    assert load_window([], (1.5, 9.0)) == (1.5, 9.0)
