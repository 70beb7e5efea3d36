"""summary.md and the console verdict table explain the window Pearson r wherever they show it
(`testbed.report.verdict.PEARSON_NOTE`): a reader of a CI log meets "window r" with no other
page at hand."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from testbed.report.markdown import summary_markdown
from testbed.report.verdict import PEARSON_NOTE, print_verdict

DEPTH = {
    "metric": "queue_depth_mean", "queue": None, "measured": 40.0, "measured_ci": [35.0, 45.0],
    "predicted": 38.0, "rel_error": -0.05, "target_kind": "pearson_r", "target": 0.9,
    "pearson_r": 0.95, "within_target": True,
}  # fmt: skip


def summary(**windows: Any) -> dict[str, Any]:
    return {
        "scenario": "overload", "run_id": "r1", "metrics": [DEPTH],
        "verdict": {"status": "pass", "within": 1, "judged": 1}, "windows": windows,
    }  # fmt: skip


def test_summary_md_prints_the_window_pearson_note() -> None:
    text = summary_markdown(summary(mape=0.04, pearson_r=0.95))
    assert "queue-depth Pearson r 0.950" in text
    assert f"({PEARSON_NOTE})" in " ".join(text.split())
    assert "window r = 0.95 (target ≥ 0.90)" in text  # the depth row's criterion
    assert PEARSON_NOTE not in summary_markdown(summary())  # no windows, nothing to explain


def test_the_console_table_explains_a_row_judged_by_window_r() -> None:
    buffer = io.StringIO()
    print_verdict(summary(pearson_r=0.95), Console(file=buffer, width=400))
    assert PEARSON_NOTE in " ".join(buffer.getvalue().split())
