"""Report pieces on plain data: fault spans and scale marks, verdict rows, the sweep document
and page (capacity figures from hand-made summaries)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.report.plots import fault_spans, scale_marks
from testbed.report.sweep_page import sweep_document, write_sweep_page
from testbed.report.verdict import fmt_value, verdict_rows
from testbed.sweep import expand_grid, parse_set


def test_fault_spans_pair_starts_and_ends_per_target() -> None:
    events = pd.DataFrame(
        [
            (2.0, "fault_start", "broker", json.dumps({"kind": "pause"}), "measured", 0),
            (3.0, "scale", "workers", "{}", "measured", 0),
            (4.0, "fault_start", "consumer", "{}", "measured", 0),
            (5.0, "fault_end", "broker", "{}", "measured", 0),
            (6.0, "scale", "workers", "{}", "measured", 0),
            (9.0, "fault_start", "broker", "{}", "measured", 1),  # another replication
            (2.5, "fault_start", "broker", "{}", "predicted", 0),  # the measured side wins
        ],
        columns=["t", "kind", "target", "detail", "source", "replication"],
    )
    assert fault_spans(events, 20.0) == [(2.0, 5.0, "pause broker"), (4.0, 20.0, "consumer")]
    assert scale_marks(events) == [3.0, 6.0]
    assert fault_spans(pd.DataFrame(), 1.0) == [] and scale_marks(pd.DataFrame()) == []


def test_verdict_rows_format_units_and_marks() -> None:
    summary = {
        "metrics": [
            {
                "metric": "latency_p95_s",
                "queue": None,
                "measured": 0.0123,
                "measured_ci": [0.011, 0.014],
                "predicted": 0.015,
                "rel_error": 0.2196,
                "within_target": True,
                "target": 0.25,
                "target_kind": "abs_rel_error",
            },
            {
                "metric": "throughput_msg_s",
                "queue": "q1",
                "measured": 1234.5,
                "measured_ci": None,
                "predicted": None,
                "rel_error": None,
                "within_target": None,
            },
        ]
    }
    first, second = verdict_rows(summary)
    assert (first.measured, first.measured_ci, first.predicted) == ("12.3 ms", "[11, 14]", "15 ms")
    assert (first.error, first.criterion, first.mark) == ("+22.0%", "error within ±25%", "✓")
    assert (second.queue, second.measured, second.mark) == ("q1", "1,234 msg/s", "–")
    assert [r.metric for r in verdict_rows(summary, overall_only=True)] == ["latency_p95_s"]
    assert fmt_value(None, "losses") == "–"
    near = {"metric": "queue_depth_mean", "queue": None, "measured": 0.01, "predicted": 0.03,
            "rel_error": 2.0, "within_target": True, "target": 1.0, "target_kind": "abs_error_msgs"}  # fmt: skip
    (row,) = verdict_rows({"metrics": [near]})
    assert (row.criterion, row.rule, row.mark) == ("near-empty queue: within ±1 msg", "±1 msg", "✓")


def _summary(throughput: float, depth: float, p95: float) -> dict[str, Any]:
    def e(metric: str, m: float, p: float) -> dict[str, Any]:
        return {
            "metric": metric,
            "queue": None,
            "measured": m,
            "measured_ci": [m * 0.9, m * 1.1],
            "predicted": p,
            "predicted_ci": None,
        }

    return {
        "verdict": {"status": "pass"},
        "metrics": [
            e("throughput_msg_s", throughput, throughput * 1.02),
            e("queue_depth_mean", depth, depth),
            e("latency_p95_s", p95, p95 * 1.5),
        ],
    }


def test_sweep_document_finds_saturation_and_sla_capacity(tmp_path: Path) -> None:
    axes = [parse_set("producers[0].count=1:4:1")]
    points = expand_grid({"producers": [{"name": "p", "count": 1}]}, axes)
    figures = [(100, 0.5, 0.004), (200, 0.8, 0.020), (290, 2.0, 0.080), (295, 60.0, 0.900)]
    summaries = [_summary(*f) for f in figures]
    run_dirs = [tmp_path / "runs" / f"r{i}" for i in range(4)]
    doc = sweep_document(
        scenario="s",
        axes=axes,
        points=points,
        run_dirs=run_dirs,
        summaries=summaries,
        sla_p95=0.1,
        min_gain=0.5,
        root=tmp_path,
    )
    assert doc["saturation"]["measured"]["x"] == 4.0  # gain (5/290)/(1/3) ≈ 0.05, queue grows
    assert doc["sla_capacity"]["measured"]["x"] == 3.0  # p95 80 ms ≤ 100 ms
    assert doc["sla_capacity"]["predicted"]["x"] == 2.0  # predicted p95 120 ms at x = 3
    assert doc["points"][0]["run_dir"] == "runs/r0"
    page = write_sweep_page(doc, tmp_path / "sweep.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "<script" not in page
    assert 'href="runs/r3/report.html"' in page
    json.dumps(doc)  # serialisable as written to sweep.json
