"""Issue 16 items 2 and 3: ambiguous bare numbers, Toxiproxy's names, and values that validate
but fail or mislead later. Each case names the file, line, field and value at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.scenario_loader import parse_scenario
from testbed.exceptions import ScenarioIssue

BASE = """\
name: bounds
duration: 60s
topology:
  exchanges: [{name: x, type: direct}]
  queues:
    - name: work
      bindings: [{exchange: x, key: k}]
producers:
  - name: p
    count: 2
    queue: work
    arrival: 10/s
consumers:
  - name: c
    queue: work
    count: 2
    prefetch: 10
    service_time: {kind: exponential, mean: 5ms}
"""


def _issues(text: str, tmp_path: Path | None = None) -> tuple[object, list[ScenarioIssue]]:
    return parse_scenario(text, "s.yaml", tmp_path)


def _one(text: str, path: str, severity: str = "error") -> ScenarioIssue:
    scenario, issues = _issues(text)
    found = [i for i in issues if i.path == path and i.severity == severity]
    assert found, f"no {severity} at {path}: {[str(i) for i in issues]}"
    if severity == "error":
        assert scenario is None
    return found[0]


def _fault(body: str) -> str:
    return BASE + "faults:\n  - " + body.replace("\n", "\n    ") + "\n"


# --- item 2: units --------------------------------------------------------------------------


def test_bare_toxic_latency_asks_for_ms() -> None:
    text = _fault("kind: latency\nat: 1s\nduration: 5s\nlatency: 50")
    issue = _one(text, "faults[0].latency")
    assert issue.line == 23
    assert "50 has no unit" in issue.message and "'50ms'" in issue.message
    assert "Toxiproxy reads latency in milliseconds" in issue.message


def test_bare_slicer_delay_is_microseconds_in_toxiproxy() -> None:
    text = _fault("kind: slicer\nat: 1s\nduration: 5s\naverage_size: 100\ndelay: 10")
    assert "'10us'" in _one(text, "faults[0].delay").message


def test_bare_bandwidth_rate_suggests_toxiproxy_kb_per_s() -> None:
    text = _fault("kind: bandwidth\nat: 1s\nduration: 5s\nrate: 100")
    issue = _one(text, "faults[0].rate")
    assert "'100KB/s'" in issue.message and "Toxiproxy reads rate in KB/s" in issue.message


def test_bandwidth_with_unit_per_second_is_accepted() -> None:
    scenario, issues = _issues(_fault("kind: bandwidth\nat: 1s\nduration: 5s\nrate: 100KB/s"))
    assert scenario is not None, [str(i) for i in issues]
    assert scenario.faults[0].rate == 100_000.0
    scenario, _ = _issues(_fault("kind: bandwidth\nat: 1s\nduration: 5s\nrate: 2MiB/min"))
    assert scenario is not None and scenario.faults[0].rate == pytest.approx(2 * 1024**2 / 60)


def test_bare_service_time_mean_is_an_error_on_its_own_line() -> None:
    text = BASE.replace("mean: 5ms", "mean: 5")
    issue = _one(text, "consumers[0].service_time.mean")
    assert issue.line == 18
    assert "'5ms' or '5s'" in issue.message


def test_instability_warning_sits_on_the_service_time_and_names_the_rate_line() -> None:
    """It was pinned to ``topology.queues[0].name`` (line 6), which drives nothing."""
    text = BASE.replace("arrival: 10/s", "arrival: 10000/s")  # 20,000/s against 2 × 200/s
    issue = _one(text, "consumers[0].service_time.mean", "warning")
    assert issue.line == 18
    assert "queue 'work' is unstable: utilisation ρ = 50 ≥ 1" in issue.message
    assert "arrivals from producers[0].arrival (s.yaml:12)" in issue.message
    assert "did you mean" not in issue.message  # '5ms' has its unit
    assert str(issue).startswith("s.yaml:18: consumers[0].service_time.mean: warning: ")


def test_instability_warning_suggests_ms_for_a_bare_service_time() -> None:
    text = BASE.replace("mean: 5ms", "mean: 5")  # an error of its own, and ρ = 50
    issue = _one(text, "consumers[0].service_time.mean", "warning")
    assert issue.line == 18
    assert "a bare 5 is 5 s; did you mean 5ms?" in issue.message
    assert "(or set 'overload: true' if this is an overload experiment)" in issue.message


def test_instability_warning_names_the_arrival_rate_when_nothing_reads_the_queue() -> None:
    zero = BASE.replace("count: 2\n    prefetch", "count: 0\n    prefetch")
    assert _one(zero, "consumers[0].count", "warning").line == 16
    alone = BASE[: BASE.index("consumers:")].replace(
        "arrival: 10/s", "arrival:\n      kind: constant\n      rate: 10/s"
    )
    issue = _one(alone, "producers[0].arrival.rate", "warning")
    assert issue.line == 14 and "no consumer reads it at 20 msg/s" in issue.message


def test_bare_zero_and_bare_run_durations_stay_valid() -> None:
    text = BASE.replace("mean: 5ms}", "mean: 5ms}\n    start: 0").replace("60s", "60")
    scenario, issues = _issues(text.replace("{kind: exponential, mean: 5ms}", "0"))
    assert scenario is not None, [str(i) for i in issues]


def test_fault_errors_name_the_field_not_the_kind() -> None:
    text = _fault("kind: latency\nat: 1s\nduration: 5s\nlatency: 50ms\nside: consumer")
    issue = _one(text, "faults[0].side")
    assert "did you mean 'consumers'" in issue.message


@pytest.mark.parametrize(
    ("key", "hint"), [("stream", "'direction'"), ("for", "'duration'"), ("type", "'kind'")]
)
def test_toxiproxy_names_get_a_hint(key: str, hint: str) -> None:
    text = _fault(f"kind: latency\nat: 1s\nduration: 5s\nlatency: 50ms\n{key}: upstream")
    assert hint in _one(text, f"faults[0].{key}").message


ELASTIC = """\
name: el
duration: 60s
topology:
  load_balanced: [{alias: lb, queues: 1, max_queues: 4}]
producers: [{name: p, queue: lb, arrival: 10/s}]
consumers: [{name: c, queue: lb, count: 1, service_time: 10ms}]
autoscaling:
  - policy: elastic
    target: c
    alias: lb
    min_load: 0.2
    max_load: 0.8
    vm_capacity: 100/s
    max_replicas: 4
"""


def test_elastic_interval_is_its_period_and_both_are_refused() -> None:
    scenario, issues = _issues(ELASTIC + "    interval: 5s\n")
    assert scenario is not None, [str(i) for i in issues]
    assert scenario.autoscaling[0].period == 5.0 == scenario.autoscaling[0].interval
    issue = _one(ELASTIC + "    interval: 5s\n    period: 2s\n", "autoscaling[0].interval")
    assert "not both" in issue.message


# --- item 3: bounds -------------------------------------------------------------------------


def test_prefetch_above_16_bits_is_refused_on_amqp() -> None:
    issue = _one(BASE.replace("prefetch: 10", "prefetch: 70000"), "consumers[0].prefetch")
    assert "65535" in issue.message and issue.line == 17


def test_routing_and_binding_keys_over_255_bytes() -> None:
    long = "é" * 130  # 260 bytes, 130 characters
    _one(BASE.replace("key: k}", f"key: {long}}}"), "topology.queues[0].bindings[0].key")
    text = BASE.replace(
        "queue: work\n    arrival", f"exchange: x\n    routing_key: {long}\n    arrival"
    )
    assert "260 bytes" in _one(text, "producers[0].routing_key").message


def test_amq_prefixed_names_are_refused_on_rabbitmq() -> None:
    text = BASE.replace("name: work", "name: amq.work").replace("queue: work", "queue: amq.work")
    assert "reserved" in _one(text, "topology.queues[0].name").message


def test_amq_prefixed_exchange_alias_and_dead_letter_names_are_refused_on_rabbitmq() -> None:
    """Every name the testbed declares is checked, not only the queues': an exchange, a
    load-balanced alias (its member queues carry its name) and a dead-letter queue."""
    exchange = BASE.replace("name: x,", "name: amq.x,").replace("exchange: x,", "exchange: amq.x,")
    assert "reserved by RabbitMQ" in _one(exchange, "topology.exchanges[0].name").message
    alias = BASE.replace(
        "  queues:\n", "  load_balanced: [{alias: amq.pool, queues: 1}]\n  queues:\n", 1
    )
    assert "reserved" in _one(alias, "topology.load_balanced[0].alias").message
    dlq = BASE.replace(
        "      bindings:",
        "      visibility: {timeout: 500ms, max_deliveries: 3, dead_letter_queue: amq.dead}\n"
        "      bindings:",
    )
    issue = _one(dlq, "topology.queues[0].visibility.dead_letter_queue")
    assert "'amq.dead'" in issue.message and issue.line == 7
    # the same names are fine on ActiveMQ, which reserves no such prefix
    scenario, issues = _issues(
        dlq.replace("duration: 60s", "duration: 60s\nbroker: {kind: activemq}")
    )
    assert scenario is not None and not [i for i in issues if "reserved" in i.message]


def test_bool_is_not_a_count() -> None:
    issue = _one(BASE.replace("count: 2\n    queue: work", "count: true\n    queue: work"),
                 "producers[0].count")  # fmt: skip
    assert "boolean" in issue.message and issue.line == 10


def test_absurd_duration_is_refused() -> None:
    issue = _one(BASE.replace("duration: 60s", "duration: 1e300s"), "duration")
    assert "366 days" in issue.message


def test_crash_count_larger_than_its_group() -> None:
    text = _fault("kind: consumer_crash\nat: 5s\ntarget: c\ncount: 3")
    assert "more clients than group 'c' has (2)" in _one(text, "faults[0].count").message


def test_stochastic_fault_past_the_end_warns() -> None:
    text = _fault("kind: stochastic\ntarget: c\nmttf: 600s\nmttr: 5s\nuntil: 90s")
    assert "past the end" in _one(text, "faults[0].until", "warning").message
    assert "no failure" in _one(text, "faults[0].mttf", "warning").message
    scenario, _ = _issues(text)
    assert scenario is not None  # warnings only


def test_nan_in_a_trace_echoes_only_the_cell(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("t\n0.5\ninf,secret-column\n")
    text = BASE.replace("arrival: 10/s", "arrival: {kind: trace, file: t.csv}")
    scenario, issues = _issues(text, tmp_path)
    (issue,) = [i for i in issues if i.severity == "error"]
    assert "'inf'" in issue.message and "secret" not in issue.message


def test_a_resolved_scenario_reads_back_although_its_numbers_are_bare() -> None:
    """A run directory's scenario.yaml is in base units (workers and reports read it back);
    the same numbers written by a user still need their units."""
    from testbed.core.scenario_loader import parse_scenario
    from testbed.core.scenario_units import RESOLVED_HEADER

    text = """
name: r
duration: 5s
broker: {kind: rabbitmq}
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: {kind: poisson, rate: 10/s}}]
consumers: [{name: c, queue: q, service_time: {kind: exponential, mean: 5ms}}]
"""
    scenario, issues = parse_scenario(text)
    assert scenario is not None, issues
    resolved = scenario.resolved_yaml()
    assert resolved.startswith(RESOLVED_HEADER) and "mean: 0.005" in resolved
    again, issues = parse_scenario(resolved)
    assert again is not None and again.consumers[0].service_time.mean == 0.005, issues
    bare, issues = parse_scenario(resolved.removeprefix(RESOLVED_HEADER))
    assert bare is None and any("has no unit" in str(i) for i in issues)


def test_every_library_scenario_reads_back_from_its_resolved_copy() -> None:
    """Workers, reports and comparisons load the run directory's resolved scenario.yaml: for
    every scenario of the library it must parse back to the same scenario."""
    from pathlib import Path

    from testbed.core.scenario_loader import load_scenario, parse_scenario

    root = Path(__file__).resolve().parents[2] / "workloads"
    files = sorted(root.glob("**/*.yaml"))
    assert len(files) > 20
    for f in files:
        scenario = load_scenario(f)
        again, issues = parse_scenario(scenario.resolved_yaml(), str(f), base_dir=f.parent)
        assert again is not None, (f, [str(i) for i in issues])
        assert again.model_dump() == scenario.model_dump(), f
