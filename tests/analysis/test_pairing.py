"""Measured ⟷ predicted window join and the across-window MAPE / Pearson r."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import SparkSession

from testbed.analysis.pairing import pair_windows, window_scores
from testbed.analysis.windows import WINDOW_COLUMNS

M_RATE = [100.0, 120.0, 90.0, 110.0, 0.0]
P_RATE = [105.0, 110.0, 99.0, 100.0, 7.0]
M_DEPTH = [1.0, 4.0, 2.0, 8.0, 3.0]
P_DEPTH = [2.0, 5.0, 2.5, 6.0, 1.0]


def _windows(spark: SparkSession):  # type: ignore[no-untyped-def]
    rows = []
    for k in range(5):
        for source, rate, depth in (("measured", M_RATE, M_DEPTH), ("predicted", P_RATE, P_DEPTH)):
            row = dict.fromkeys(WINDOW_COLUMNS)
            row.update(
                run_id="r",
                source=source,
                replication=0,
                queue="*",
                window=k,
                t_start=float(k),
                phase="load",
                ack_rate=rate[k],
                queue_depth=depth[k],
                consumers=2.0,
            )
            rows.append(row)
    # a drain window and an unpaired predicted replication: both left out of the scores
    drain = dict.fromkeys(WINDOW_COLUMNS)
    drain.update(
        run_id="r",
        source="measured",
        replication=0,
        queue="*",
        window=5,
        t_start=5.0,
        phase="drain",
        ack_rate=1.0,
        queue_depth=1.0,
    )
    drain_p = {**drain, "source": "predicted", "ack_rate": 500.0, "queue_depth": 100.0}
    extra = {**drain_p, "replication": 1, "window": 0, "phase": "load"}
    rows += [drain, drain_p, extra]
    schema = (
        "run_id string, source string, replication int, queue string, window long, "
        "t_start double, phase string, publish_rate double, deliver_rate double, "
        "ack_rate double, latency_count long, latency_mean_s double, latency_p50_s double, "
        "latency_p95_s double, latency_p99_s double, depth_ready double, "
        "depth_unacked double, queue_depth double, consumers double, producers_blocked double, "
        "published_in_load long, acked_in_load long"
    )
    return spark.createDataFrame([tuple(r[c] for c in WINDOW_COLUMNS) for r in rows], schema)


def test_pairs_windows_by_replication_and_scores_load_windows(spark: SparkSession) -> None:
    paired = pair_windows(_windows(spark))
    assert paired.count() == 6  # 5 load windows + the drain window; replication 1 unpaired
    scores = {r.series: r for r in window_scores(paired).collect()}
    m, p = np.array(M_RATE), np.array(P_RATE)
    nonzero = m != 0
    assert scores["ack_rate"].n == 5
    assert scores["ack_rate"].mape == pytest.approx(
        np.mean(np.abs(p[nonzero] - m[nonzero]) / m[nonzero])
    )
    assert scores["ack_rate"].pearson_r == pytest.approx(np.corrcoef(m, p)[0, 1])
    assert scores["queue_depth"].pearson_r == pytest.approx(np.corrcoef(M_DEPTH, P_DEPTH)[0, 1])
    assert scores["consumers"].pearson_r is None  # constant on both sides: no correlation
    assert scores["consumers"].mape == 0.0
    assert "latency_p95_s" not in scores  # nothing to pair (null on both sides)
