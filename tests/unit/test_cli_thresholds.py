"""Thresholds (SLOs, k6-style) and run overrides: parsing with located errors, judging on the
measured figures, the scenario field, and the overrides applied before validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.overrides import RunOverrides
from testbed.core.scenario_loader import parse_scenario, validate_file
from testbed.core.thresholds import evaluate, measured_figures, parse_threshold
from testbed.exceptions import ConfigurationError

BASE = """\
name: t
duration: 10s
topology:
  queues: [{name: work}, {name: audit}]
producers:
  - {name: p, queue: work, arrival: {kind: poisson, rate: 20/s}}
  - {name: q, queue: audit, arrival: 5/s}
consumers:
  - {name: c, queue: work, count: 2, service_time: 5ms}
  - {name: d, queue: audit}
"""


def test_parse_reads_units_queue_and_operator() -> None:
    t = parse_threshold("p95 < 50ms")
    assert (t.metric, t.op, t.limit, t.queue) == ("p95", "<", pytest.approx(0.05), None)
    assert parse_threshold("work: p99 <= 0.1s").queue == "work"
    assert parse_threshold("throughput >= 3000/min").limit == pytest.approx(50.0)
    assert parse_threshold("throughput>180").limit == 180.0  # a bare rate is per second
    assert parse_threshold("lost == 0").spec.key == "lost"
    assert parse_threshold("unroutable < 500").spec.key == "unroutable"
    ok = evaluate([parse_threshold("unroutable < 500")], measured_figures({}, {"unroutable": 312}))
    assert [(r.ok, r.measured) for r in ok] == [(True, 312.0)]
    ordered = evaluate(
        [parse_threshold("order_violations == 0")], measured_figures({}, {"order_violations": 3})
    )
    assert [(r.ok, r.measured) for r in ordered] == [(False, 3.0)]  # an in-order SLO missed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p95 < 50", "give the latency a unit, e.g. 50ms or 50s"),
        ("throughtput > 5", "unknown metric 'throughtput' (did you mean 'throughput'?)"),
        ("work: lost == 0", "lost is counted for the whole run only; drop 'work:'"),
        ("p95 = 5ms", "'=' is not a comparison; write '=='"),
        ("fast please", "is not '[QUEUE:] METRIC OP VALUE'"),
        ("throughput > 5ms", "not a number per time unit"),
    ],
)
def test_parse_errors_name_the_text_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_threshold(text)
    assert message in str(e.value) and repr(text) in str(e.value)


def test_judged_on_measured_figures_and_a_missing_figure_misses() -> None:
    summary = {"metrics": [
        {"metric": "latency_p95_s", "queue": None, "measured": 0.040, "predicted": 0.9},
        {"metric": "latency_p99_s", "queue": "work", "measured": 0.120},
        {"metric": "throughput_msg_s", "queue": None, "measured": 185.0},
    ]}  # fmt: skip
    figures = measured_figures(summary, {"sent": 100, "lost": 2})
    texts = ["p95 < 50ms", "work: p99 < 100ms", "throughput >= 180/s", "lost == 0",
             "sent > 0", "audit: p95 < 1s"]  # fmt: skip
    results = evaluate([parse_threshold(t) for t in texts], figures)
    assert [r.ok for r in results] == [True, False, True, False, True, False]
    assert results[1].measured == pytest.approx(0.12) and results[5].measured is None
    assert results[3].to_json()["measured"] == 2.0


def test_scenario_thresholds_errors_have_file_line_field_and_value(tmp_path: Path) -> None:
    doc = BASE + "thresholds:\n  - p95 < 50ms\n  - p95 < 50\n  - wrok: p99 < 1s\n"
    f = tmp_path / "s.yaml"
    f.write_text(doc)
    scenario, issues = validate_file(f)
    assert scenario is None
    shown = [str(i) for i in issues]
    assert (
        f"{f}:13: thresholds[1]: 'p95 < 50': give the latency a unit, e.g. 50ms or 50s" in shown
    ), shown
    f.write_text(BASE + "thresholds:\n  - p95 < 50ms\n  - wrok: p99 < 1s\n")  # cross-field check
    shown = [str(i) for i in validate_file(f)[1]]
    assert shown == [
        f"{f}:13: thresholds[1]: 'wrok: p99 < 1s': no queue 'wrok' (did you mean 'work'?)"
    ]
    doc = BASE + "thresholds:\n  - work: p99 < 1s\n  - 'audit: p95 < 1s'\n  - lost == 0\n"
    good, issues = parse_scenario(doc, "s.yaml")
    assert good is not None, issues
    assert good.thresholds == ["work: p99 < 1s", "audit: p95 < 1s", "lost == 0"]


def test_overrides_change_the_data_before_validation(tmp_path: Path) -> None:
    over = RunOverrides(("consumers[c].prefetch=1",), "50/s", "3s", producers=3, consumers=4)
    s, issues = parse_scenario(BASE, "s.yaml", overrides=over)
    assert s is not None, issues
    assert s.duration == 3.0 and [p.count for p in s.producers] == [3, 3]
    assert [c.count for c in s.consumers] == [4, 4] and s.consumers[0].prefetch == 1
    assert [p.arrival.rate for p in s.producers] == [50.0, 50.0]  # the shorthand too
    # a bad override is reported like a scenario error, at the file's line, naming the option
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    _, issues = validate_file(f, RunOverrides(rate="0/s"))
    assert any(
        str(i).startswith(f"{f} [--rate 0/s]:6: producers[0].arrival.rate:") for i in issues
    ), [str(i) for i in issues]


def test_rate_override_refuses_an_arrival_without_one_rate() -> None:
    doc = BASE.replace("{kind: poisson, rate: 20/s}", "{kind: mmpp, rates: [1/s, 2/s], "
                       "mean_sojourns: [1s, 1s]}")  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"producers\[0\] \(p\) has a mmpp arrival"):
        parse_scenario(doc, "s.yaml", overrides=RunOverrides(rate="5/s"))
    with pytest.raises(ConfigurationError, match="expected PATH=VALUE"):
        parse_scenario(BASE, "s.yaml", overrides=RunOverrides(sets=("seed",)))
