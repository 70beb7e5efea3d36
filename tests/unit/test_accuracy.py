"""The accuracy suite's bookkeeping: checks and the Markdown table, on hand-made summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from testbed.accuracy import CASES, SCENARIOS, all_cases
from testbed.accuracy_checks import ledger_check, per_type_check
from testbed.accuracy_doc import markdown, misses, totals


def test_every_case_names_a_library_scenario() -> None:
    for case in CASES:
        assert (SCENARIOS / case.scenario).is_file(), case


def test_ledger_check_is_exact() -> None:
    same = {"ledger": {"measured": {"lost": 3, "duplicated": 0, "dead_lettered": 1},
                       "predicted": {"lost": 3, "duplicated": 0, "dead_lettered": 1}}}  # fmt: skip
    assert ledger_check(same)["ok"] is True
    off = {"ledger": {"measured": {"lost": 3}, "predicted": {"lost": 2}}}
    assert ledger_check(off)["ok"] is False


def test_per_type_check_takes_the_worst_type(tmp_path: Path) -> None:
    (tmp_path / "analysis").mkdir()
    pd.DataFrame(
        [
            ("measured", "a", 0.010),
            ("predicted", "a", 0.0105),
            ("predicted", "a", 0.0107),
            ("measured", "b", 0.020),
            ("predicted", "b", 0.025),
        ],  # fmt: skip
        columns=["source", "flow", "latency_p50_s"],
    ).assign(latency_p95_s=lambda f: f.latency_p50_s * 2).to_parquet(
        tmp_path / "analysis" / "latency_by_type.parquet"
    )
    check = per_type_check(tmp_path)
    assert abs(check["value"] - 0.25) < 1e-12  # type b: 25 ms vs 20 ms
    assert check["ok"] is False and '"a": 0.06' in check["note"]  # median of a's = 10.6 ms


def test_markdown_has_a_row_per_metric_and_the_checks() -> None:
    doc = {
        "command": "mqbed bench --suite accuracy", "date": "2026-11-21", "quick": False,
        "host": {"name": "vm", "cpus": 2, "memory_bytes": 24 * 2**30}, "replications": 3,
        "cases": [{
            "case": "quickstart", "scenario": "quickstart.yaml", "wall_s": 80.0,
            "rows": [
                {"metric": "throughput_msg_s", "queue": None, "measured": 200.0,
                 "measured_ci": [198.0, 202.0], "predicted": 199.0, "rel_error": -0.005,
                 "target": 0.05, "target_kind": "abs_rel_error", "within_target": True,
                 "inside_measured_ci": True},
                {"metric": "latency_p95_s", "queue": None, "measured": 0.025,
                 "measured_ci": [0.02, 0.03], "predicted": 0.02, "rel_error": -0.2,
                 "target": 0.25, "target_kind": "abs_rel_error", "within_target": True,
                 "inside_measured_ci": True},
                {"metric": "queue_depth_mean", "queue": None, "measured": 0.01,
                 "measured_ci": [0.0, 0.02], "predicted": 0.03, "rel_error": 2.0,
                 "target": 1.0, "target_kind": "abs_error_msgs", "within_target": True,
                 "inside_measured_ci": False},
            ],
            "checks": [{"check": "fan-out latency mean", "target": 0.15, "value": 0.4,
                        "ok": False, "note": ""},
                       {"check": "saturation point", "target": "within one step (5)",
                        "value": {"measured": 10.0, "predicted": 15.0}, "ok": True,
                        "note": ""}],
        }, {"case": "broken", "scenario": "x.yaml", "error": "RuntimeError('boom')"}],
    }  # fmt: skip
    md = markdown(doc, ["quickstart [rabbitmq]", "never run"])
    assert "| throughput_msg_s | all | 200 | 198–202 | 199 | -0.5 % | ±5 % | ✓ | ✓ |" in md
    assert "| latency_p95_s | all | 25 ms | 20 ms–30 ms | 20 ms | -20.0 % | ±25 % |" in md
    assert "| ±1 msg | ✓ |" in md
    assert "**fan-out latency mean**: 0.4 (target 0.15) ✗" in md
    assert "**saturation point**: measured 10, predicted 15 (target within one step (5)) ✓" in md
    assert "**Failed:** RuntimeError('boom')" in md and "vm, 2 CPUs, 24 GiB" in md
    assert "## Overview" in md and "Not run for this document (2): quickstart [rabbitmq]" in md


def test_bench_refuses_an_unknown_suite_and_one_out_for_two_reports() -> None:
    from typer.testing import CliRunner

    from testbed.cli import app

    bad = CliRunner().invoke(app, ["bench", "--suite", "speed"])
    assert bad.exit_code != 0
    assert "--suite 'speed': choose performance, accuracy or all" in bad.output
    both = CliRunner().invoke(app, ["bench", "--suite", "all", "--report", "x.md"])
    assert both.exit_code != 0
    assert "--report names one report; use it with one --suite" in both.output


def test_every_case_runs_on_rabbitmq_the_library_on_activemq_and_kombu_once() -> None:
    cases = all_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names))
    assert "quickstart [rabbitmq]" in names and "quickstart [activemq]" in names
    assert "quickstart [rabbitmq/kombu]" in names
    assert any(c.folder == "holdout" for c in cases)
    # the holdouts judge both brokers (their file names name no library scenario)
    holdouts = [c for c in cases if c.folder == "holdout"]
    assert {c.overrides["broker.kind"] for c in holdouts} == {"rabbitmq", "activemq"}
    assert len(holdouts) == 2 * len({c.scenario for c in holdouts})
    for c in cases:
        assert c.path.is_file(), c
        assert c.overrides["broker.kind"] in ("rabbitmq", "activemq")


def _row(metric: str, within: bool | None, inside: bool | None, queue: str | None = None) -> dict:
    return {"metric": metric, "queue": queue, "within_target": within,
            "inside_measured_ci": inside, "predicted": 0.05}  # fmt: skip


def test_a_miss_is_outside_target_and_outside_the_measured_interval() -> None:
    noisy = {"case": "a", "rows": [_row("latency_p50_s", False, True)], "checks": []}
    assert misses(noisy) == []  # outside target but inside the interval: noise, not a miss
    off = {"case": "b", "rows": [_row("latency_p50_s", False, False),
                                 _row("latency_p99_s", False, False, queue="q")],
           "checks": [{"check": "c", "ok": False}]}  # fmt: skip
    assert misses(off) == ["latency_p50_s", "check: c"]  # whole-run rows only
    t = totals([noisy, off, {"case": "c", "rows": [_row("latency_ks", True, None)]}])
    assert t["metrics"] == 3 and t["within_target"] == 1
    assert t["with_interval"] == 2 and t["inside_interval"] == 1
    assert t["cases_missing"] == ["b"] and t["worst_ks"] == 0.05


def test_a_partial_rerun_keeps_other_cases_and_names_its_own_command(tmp_path: Path) -> None:
    """``--only``: the named cases replace theirs, the others stay with the command that ran
    them, and the header names the newest command (a suite run case group by case group)."""
    from testbed.accuracy import _write

    out = tmp_path / "accuracy.md"
    first = {"command": "mqbed bench A", "date": "d1", "host": {}, "replications": 3,
             "quick": False, "cases": [{"case": "x", "command": "mqbed bench A", "scenario": "s.yaml", "rows": [], "wall_s": 1.0},
                                       {"case": "y", "command": "mqbed bench A", "scenario": "s.yaml", "rows": [], "wall_s": 1.0}]}  # fmt: skip
    _write({**first, "interrupted": True}, out, None, False)  # Ctrl-C in the first run
    second = {**first, "command": "mqbed bench B", "date": "d2",
              "cases": [{"case": "y", "command": "mqbed bench B", "scenario": "s.yaml", "rows": [], "wall_s": 1.0}]}  # fmt: skip
    _write(second, out, ["y"], False)
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["command"] == "mqbed bench B" and doc["date"] == "d2"
    assert [(c["case"], c["command"]) for c in doc["cases"]] == [
        ("x", "mqbed bench A"), ("y", "mqbed bench B")]  # fmt: skip
    assert "mqbed bench B" in out.read_text()
    # the second run finished: the merged document is not titled "interrupted" any more
    assert doc["interrupted"] is False and "interrupted" not in out.read_text().splitlines()[0]


def test_every_case_is_a_valid_scenario_on_its_broker() -> None:
    """A library file may use what only one broker has (qos-be publishes ``mandatory``, which
    ActiveMQ cannot return): each case's scenario, as the suite writes it, loads cleanly."""
    from testbed.accuracy import _scenario_text
    from testbed.core.scenario_loader import parse_scenario

    for case in all_cases():
        for quick in (False, True):
            s, issues = parse_scenario(_scenario_text(case, quick), case.scenario)
            assert s is not None, (case.name, [str(i) for i in issues])
    be = next(c for c in all_cases() if c.name == "QoS experiment, BE [activemq]")
    assert "mandatory" not in _scenario_text(be, False)
    be = next(c for c in all_cases() if c.name == "QoS experiment, BE [rabbitmq]")
    assert "mandatory: true" in _scenario_text(be, False)
