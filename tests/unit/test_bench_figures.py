"""The figure protocol of the benchmark scripts (testbed/bench/figures.py, catalogue.py): what a
script prints, how `mqbed bench` reads it back out of ordinary output, and how a figure is
judged against its target."""

from __future__ import annotations

import json

import pytest

from testbed.bench.catalogue import CATALOGUE, emit, emit_broker, expected
from testbed.bench.figures import PREFIX, Anchor, Figure, Target, parse
from testbed.bench.runner import BENCHMARKS, merge


def _fig(value: float | None, target: Target | None, anchor: float | None = None,
         **kw: object) -> Figure:  # fmt: skip
    a = None if anchor is None else Anchor("base", anchor)
    return Figure("a", "a.x", "x", "ms", value, target, a, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "value", "anchor", "status"),
    [
        (Target("<", 5.0), 4.99, None, "pass"),
        (Target("<", 5.0), 5.0, None, "fail"),  # strict: the bound itself fails
        (Target("<=", 1.2, "ratio"), 120.0, 100.0, "pass"),
        (Target("<=", 1.2, "ratio"), 121.0, 100.0, "fail"),
        # a ratio target judges the ratio, not the (large) value
        (Target(">=", 0.8, "ratio"), 25_000.0, 50_000.0, "fail"),
        (Target(">=", 0.8, "ratio"), 40_000.0, 50_000.0, "pass"),
        (Target(">=", 50_000.0), 40_000.0, 50_000.0, "fail"),  # and a value target the value
        (Target("within", 0.01, "ratio"), 990.0, 1000.0, "pass"),
        (Target("within", 0.01, "ratio"), 1011.0, 1000.0, "fail"),
        (Target("within", 0.01, "ratio"), 989.0, 1000.0, "fail"),
        (Target(">=", 0.8, "ratio"), 40_000.0, None, "not judged"),  # no anchor, no ratio
        (None, 3.0, None, "no target"),
        (Target("<", 5.0), None, None, "not measured"),
    ],
)
def test_a_figure_is_judged_against_its_target(
    target: Target | None, value: float | None, anchor: float | None, status: str
) -> None:
    f = _fig(value, target, anchor)
    assert f.status == status
    assert f.passed is {"pass": True, "fail": False}.get(status)


def test_a_check_takes_the_scripts_outcome_and_an_unjudged_figure_has_none() -> None:
    check = Target("check", text="intervals overlap")
    assert _fig(1.0, check, ok=True).status == "pass"
    assert _fig(1.0, check, ok=False).status == "fail"
    assert _fig(9.0, Target("<", 5.0), judged=False).status == "not judged"
    assert check.label() == "intervals overlap"
    assert Target(">=", 0.8, "ratio").label("msg/s") == "≥ 0.8 × anchor"
    assert Target("<", 8192).label("MiB") == "< 8,192 MiB"
    assert Target("within", 0.01, "ratio").label() == "within ±1 % of anchor"


def test_parse_reads_records_out_of_ordinary_output(capsys: pytest.CaptureFixture[str]) -> None:
    emit("workload.generator_pika", 20_000.0, anchor=25_000.0)
    emit_broker("rabbitmq", "3.10.8")
    emit_broker("activemq", None)  # unknown version: no record
    emit("correlation.cpu_per_row@1e6", 12.5, name="CPU per row, 1e6", unit="µs")
    records = capsys.readouterr().out
    dump = json.dumps({"generator": {"ratio": 0.8}}, indent=2)
    text = "\n".join([
        "1. throughput: 133,301 simulated msg/s   (target ≥ 50,000)",
        *records.splitlines()[:2], dump, f"echo {PREFIX}{{\"not\": \"at line start\"}}",
        f"{PREFIX}{{broken json", f"{PREFIX}{{\"area\": \"x\"}}",  # malformed, kept aside
        *records.splitlines()[2:], "", "tail line",
    ])  # fmt: skip
    parsed = parse(text)
    assert [f.key for f in parsed.figures] == [
        "workload.generator_pika",
        "correlation.cpu_per_row@1e6",
    ]
    pika = parsed.figures[0]
    assert pika.value == 20_000.0 and pika.ratio == pytest.approx(0.8)
    assert pika.anchor == Anchor("bare pika loop", 25_000.0) and pika.status == "pass"
    assert pika.target == CATALOGUE["workload.generator_pika"].target
    assert parsed.brokers == {"rabbitmq": "3.10.8"}
    assert len(parsed.bad) == 2
    assert parsed.other[0].startswith("1. throughput") and parsed.other[-1] == "tail line"
    assert dump in "\n".join(parsed.other) and not any(
        line.startswith(PREFIX) for line in parsed.other
    )


def test_the_verdict_is_recomputed_not_taken_from_the_record() -> None:
    record = _fig(9.0, Target("<", 5.0)).record()
    assert record["pass"] is False
    record |= {"pass": True, "status": "pass", "ratio": 99.0}  # a script that claims otherwise
    (fig,) = parse(PREFIX + json.dumps(record)).figures
    assert fig.passed is False and fig.ratio is None


def test_emit_takes_catalogue_targets_and_refuses_nan(capsys: pytest.CaptureFixture[str]) -> None:
    fig = emit("simulator.hour_rss", float("nan"), note="child died")
    assert fig.value is None and fig.status == "not measured"
    assert fig.note is not None and "nan" in fig.note and "child died" in fig.note
    fig = emit("fault-proxy.throughput", 900.0, anchor=float("inf"))
    assert fig.anchor is None and fig.status == "pass"
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(PREFIX) and json.loads(line[len(PREFIX) :])["value"] is None
    with pytest.raises(ValueError, match="not catalogued"):
        emit("simulator.unknown", 1.0)


def test_every_issue_target_has_a_catalogued_row_in_a_known_area() -> None:
    areas = {b.name for b in BENCHMARKS}
    assert {s.area for s in CATALOGUE.values()} == areas
    targeted = {k for k, s in CATALOGUE.items() if s.target is not None}
    for key in ("workload.generator_pika", "workload.generator_kombu",
                "workload.generator_stomp", "workload.rate_vs_schedule",
                "workload.publish_delay_p99", "workload.publish_delay_p999",
                "simulator.hour_rss", "simulator.hour_vs_6min", "simulator.speed_mm2",
                "simulator.agree_mm2", "correlation.job_s@1e8", "correlation.rss@1e8",
                "fault-proxy.added_p50", "fault-proxy.throughput"):  # fmt: skip
        assert key in targeted, key
    for s in CATALOGUE.values():  # a ratio target names what the ratio is to
        if s.target is not None and s.target.of == "ratio":
            assert s.anchor, s.name


def test_merge_keeps_every_catalogued_row_and_says_why_one_is_missing() -> None:
    emitted = [
        Figure("fault-proxy", "fault-proxy.added_p99", "p99", "ms", 0.2, Target("<", 1.0)),
        Figure("fault-proxy", "fault-proxy.extra", "extra", "ms", 3.0),
    ]
    rows = merge("fault-proxy", emitted, failed=False)
    assert [r.key for r in rows] == [f.key for f in expected("fault-proxy")] + ["fault-proxy.extra"]
    missing = [r for r in rows if r.value is None]
    assert len(missing) == len(expected("fault-proxy")) - 1
    assert all(r.note == "the script printed no figure for it" for r in missing)
    assert all(r.target is not None for r in missing)  # the target shows beside "not measured"
    failed = merge("fault-proxy", emitted[:1], failed=True)
    assert "benchmark failed" in (failed[0].note or "") and failed[1].value == 0.2
