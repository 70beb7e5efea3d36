"""The verdict document built from small hand-made inputs (no Spark)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from testbed.analysis.summary import JUDGED, SummaryInputs, build_summary
from testbed.analysis.windows import WINDOW_COLUMNS
from testbed.core.records import Ledger

TARGETS = {
    "throughput": 0.05,
    "latency_mean": 0.15,
    "latency_p50": 0.15,
    "latency_p95": 0.25,
    "latency_p99": 0.35,
    "queue_depth_pearson_r": 0.9,
    "queue_depth_mean": 0.25,
}


def _metrics(measured: dict[str, list[float]], predicted: dict[str, list[float]]) -> pd.DataFrame:
    rows = []
    for source, figures in (("measured", measured), ("predicted", predicted)):
        for metric, values in figures.items():
            for rep, v in enumerate(values):
                for queue in ("*", "work"):
                    rows.append((source, rep, queue, metric, v))
    return pd.DataFrame(rows, columns=["source", "replication", "queue", "metric", "value"])


def _inputs(
    measured: dict[str, list[float]], predicted: dict[str, list[float]], **kw: Any
) -> SummaryInputs:
    base: dict[str, Any] = dict(
        run_id="r1",
        scenario="s",
        targets=TARGETS,
        window_s=1.0,
        metrics=_metrics(measured, predicted),
        windows=pd.DataFrame(columns=WINDOW_COLUMNS),
        histogram=pd.DataFrame(columns=["replication", "queue", "window", "bucket", "n"]),
        ledgers={
            "measured": [Ledger(sent=10, lost=1)] * len(measured["throughput_msg_s"]),
            "predicted": [Ledger(sent=10, lost=0)] * 3,
        },
        ledger_files={"measured": {"sent": 10}, "predicted": {"sent": 10}},
        scores=pd.DataFrame(
            [("*", "queue_depth", 8, 0.2, 0.95), ("*", "ack_rate", 8, 0.04, 0.5)],
            columns=["queue", "series", "n", "mape", "pearson_r"],
        ),
        ks=pd.DataFrame(
            [("*", 0.12, 100, 300)], columns=["queue", "ks", "measured_n", "predicted_n"]
        ),
        has_prediction=True,
    )
    base.update(kw)
    return SummaryInputs(**base)


def _entry(doc: dict[str, Any], metric: str, queue: str | None = None) -> dict[str, Any]:
    return next(e for e in doc["metrics"] if e["metric"] == metric and e["queue"] == queue)


MEASURED = {
    "throughput_msg_s": [100.0, 104.0, 98.0],
    "latency_p95_s": [0.010, 0.012, 0.011],
    "queue_depth_mean": [2.0, 3.0, 2.5],
}
PREDICTED = {
    "throughput_msg_s": [101.0, 99.0, 103.0],
    "latency_p95_s": [0.020, 0.021, 0.019],
    "queue_depth_mean": [1.0, 1.5, 1.2],
}


def test_medians_t_intervals_errors_and_targets() -> None:
    doc = build_summary(_inputs(MEASURED, PREDICTED))
    assert {"run_id", "scenario", "metrics", "ledger", "windows"} <= set(doc)
    tp = _entry(doc, "throughput_msg_s")
    assert tp["measured"] == 100.0 and tp["predicted"] == 101.0  # medians
    assert tp["rel_error"] == pytest.approx(0.01)
    m = np.array(MEASURED["throughput_msg_s"])
    half = 4.302652729911275 * m.std(ddof=1) / np.sqrt(3)  # t(0.975, 2 df)
    assert tp["measured_ci"] == pytest.approx([m.mean() - half, m.mean() + half])
    assert tp["ci_method"] == "t"
    assert tp["within_target"] is True and tp["inside_measured_ci"] is True
    p95 = _entry(doc, "latency_p95_s")
    assert p95["rel_error"] == pytest.approx((0.020 - 0.011) / 0.011)
    assert p95["within_target"] is False and p95["ks"] == 0.12
    depth = _entry(doc, "queue_depth_mean")  # stable scenario: mean 2.5 vs 1.2 predicted
    assert depth["target_kind"] == "abs_rel_error" and depth["target"] == 0.25
    assert depth["within_target"] is False and depth["pearson_r"] == 0.95
    over = _entry(build_summary(_inputs(MEASURED, PREDICTED, overload=True)), "queue_depth_mean")
    assert over["target_kind"] == "pearson_r" and over["within_target"] is True  # r 0.95 ≥ 0.9
    loss = _entry(doc, "losses")
    assert (loss["measured"], loss["predicted"]) == (1.0, 0.0)
    assert loss["target_kind"] == "inside_measured_ci"
    assert loss["within_target"] is False  # three measured replications all lost exactly 1
    assert _entry(doc, "throughput_msg_s", "work")["measured"] == 100.0
    assert not any(e["metric"] == "losses" and e["queue"] for e in doc["metrics"])
    assert doc["windows"]["mape"] == 0.04 and doc["windows"]["pearson_r"] == 0.95
    assert doc["verdict"] == {"status": "fail", "within": 2, "judged": 5}
    assert doc["measured_replications"] == 3 and doc["predicted_replications"] == 3


def test_one_replication_uses_a_block_bootstrap_and_poisson_for_ledger_counts() -> None:
    rates = [100.0, 90.0, 110.0, 95.0, 105.0, 100.0, 98.0, 102.0]
    windows = pd.DataFrame(
        [
            {
                **dict.fromkeys(WINDOW_COLUMNS),
                "source": "measured",
                "replication": 0,
                "queue": "*",
                "window": k,
                "phase": "load",
                "ack_rate": r,
                "queue_depth": 1.0,
            }
            for k, r in enumerate(rates)
        ]
    )
    doc = build_summary(
        _inputs(
            {"throughput_msg_s": [100.0], "queue_depth_mean": [1.0]},
            {"throughput_msg_s": [99.0], "queue_depth_mean": [1.0]},
            windows=windows,
        )
    )
    tp = _entry(doc, "throughput_msg_s")
    assert tp["ci_method"] == "block-bootstrap over 8 windows (1 replication)"
    lo, hi = tp["measured_ci"]
    assert min(rates) <= lo < np.mean(rates) < hi <= max(rates)
    loss = _entry(doc, "losses")
    assert loss["ci_method"] == "poisson (1 replication)"
    assert loss["measured_ci"] == pytest.approx([0.0253178, 5.5716434], rel=1e-5)
    assert loss["within_target"] is False  # predicted 0 is outside [0.025, 5.57]


def test_without_prediction_nothing_is_judged() -> None:
    doc = build_summary(
        _inputs(MEASURED, {}, has_prediction=False, ledgers={"measured": [Ledger()]})
    )
    assert doc["verdict"]["status"] == "no prediction"
    assert all(e["within_target"] is None and e["predicted"] is None for e in doc["metrics"])
    assert {e["metric"] for e in doc["metrics"]} <= set(JUDGED)


def test_constant_depth_falls_back_to_the_measured_interval() -> None:
    """In an overload scenario whose depth series is constant, r is undefined."""
    scores = pd.DataFrame(
        [("*", "queue_depth", 8, 0.0, None)], columns=["queue", "series", "n", "mape", "pearson_r"]
    )
    doc = build_summary(_inputs(MEASURED, PREDICTED, scores=scores, overload=True))
    depth = _entry(doc, "queue_depth_mean")
    assert depth["target_kind"] == "inside_measured_ci"
    assert depth["within_target"] is False  # 1.2 is far below the measured 2–3 interval
    assert doc["windows"]["pearson_r"] is None


def test_near_empty_stable_queue_is_judged_within_one_message() -> None:
    """SPECjms-like light load: 0.01 vs 0.03 msgs is 200 % off and says nothing; a near-empty
    queue (measured mean < 1 msg) passes within one message and fails beyond it."""
    near = {"throughput_msg_s": [100.0, 100.0, 100.0], "queue_depth_mean": [0.01, 0.012, 0.008]}
    doc = build_summary(_inputs(near, {**PREDICTED, "queue_depth_mean": [0.03, 0.02, 0.04]}))
    depth = _entry(doc, "queue_depth_mean")
    assert depth["rel_error"] == pytest.approx(2.0)
    assert depth["target_kind"] == "abs_error_msgs" and depth["target"] == 1.0
    assert depth["within_target"] is True
    far = build_summary(_inputs(near, {**PREDICTED, "queue_depth_mean": [1.5, 1.6, 1.4]}))
    assert _entry(far, "queue_depth_mean")["within_target"] is False
    # an overload scenario keeps the window-r rule whatever the mean
    over = build_summary(_inputs(near, PREDICTED, overload=True))
    assert _entry(over, "queue_depth_mean")["target_kind"] == "pearson_r"
