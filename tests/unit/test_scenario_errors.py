"""Bad scenario input: every case must name the line, the field path and the offending value.

Each case is a small YAML document and the exact (line, path, message fragment) expected.
The base document is valid, so each case changes one thing.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.cli import app
from testbed.core.scenario_loader import parse_scenario, validate_file

BASE = """\
name: t
duration: 60s
warmup: 5s
broker:
  kind: rabbitmq
topology:
  exchanges:
    - name: prices
      type: topic
  queues:
    - name: work
    - name: alarms
      bindings:
        - exchange: prices
          key: "Alarm.*"
producers:
  - name: p
    queue: work
    arrival: {kind: poisson, rate: 10/s}
consumers:
  - name: c
    queue: work
    count: 2
    prefetch: 10
    service_time: {kind: exponential, mean: 5ms}
"""


def errors(text: str) -> list[tuple[int | None, str, str]]:
    scenario, issues = parse_scenario(textwrap.dedent(text), "s.yaml")
    errs = [(i.line, i.path, i.message) for i in issues if i.severity == "error"]
    assert scenario is None or not errs
    return errs


def test_base_is_valid() -> None:
    scenario, issues = parse_scenario(BASE, "s.yaml")
    assert scenario is not None, issues
    assert [i for i in issues if i.severity == "error"] == []
    assert scenario.duration == 60.0 and scenario.warmup == 5.0
    assert scenario.consumers[0].service_time.mean == pytest.approx(0.005)


def replace(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


# one case per entry reads better than one field per line
# fmt: off
CASES = [
    # (id, document, line, path, fragment)
    ("unknown top-level key", BASE + "durration: 5s\n", 26, "durration",
     "unknown field 'durration' (did you mean 'duration'?)"),
    ("misspelt consumer field", replace("    prefetch: 10", "    prefetchh: 10"), 24,
     "consumers[0].prefetchh", "did you mean 'prefetch'?"),
    ("unknown arrival kind", replace("kind: poisson", "kind: poison"), 19,
     "producers[0].arrival.kind", "unknown kind 'poison' (did you mean 'poisson'?)"),
    ("unknown broker kind", replace("  kind: rabbitmq", "  kind: rabbitmw"), 5, "broker.kind",
     "'rabbitmw' is not allowed; expected 'rabbitmq' or 'activemq' (did you mean 'rabbitmq'?)"),
    ("bad ack mode", replace("    prefetch: 10", "    prefetch: 10\n    ack: manual"), 25,
     "consumers[0].ack", "'manual' is not allowed"),
    ("bad duration unit", replace("duration: 60s", "duration: 60 parsecs"), 2, "duration",
     "duration '60 parsecs'"),
    ("negative duration", replace("duration: 60s", "duration: -5s"), 2, "duration",
     "greater than 0"),
    ("size unit in a time distribution", replace("mean: 5ms", "mean: 5KB"), 25,
     "consumers[0].service_time.mean", "duration '5KB' has unknown unit 'KB'"),
    ("bad rate", replace("rate: 10/s", "rate: 10/fortnight"), 19, "producers[0].arrival.rate",
     "rate '10/fortnight' has unknown time unit 'fortnight'"),
    ("zero rate", replace("rate: 10/s", "rate: 0/s"), 19, "producers[0].arrival.rate",
     "greater than 0"),
    ("undeclared consumer queue", replace("    queue: work\n    count", "    queue: wrk\n    count"),
     22, "consumers[0].queue",
     "consumer reads queue 'wrk', which nobody declares (did you mean 'work'?)"),
    ("undeclared producer queue", replace("    queue: work\n    arrival", "    queue: wokr\n    arrival"),
     18, "producers[0].queue", "queue 'wokr' is not declared in topology.queues (did you mean 'work'?)"),
    ("negative prefetch", replace("prefetch: 10", "prefetch: -1"), 24, "consumers[0].prefetch",
     "prefetch must be >= 0 (0 = unlimited), got -1"),
    ("fault after the end", BASE + "faults:\n  - kind: broker_kill\n    at: 90s\n", 28,
     "faults[0].at", "fault at 90s is after the end of the run (duration 60s)"),
    ("misspelt fault kind", BASE + "faults:\n  - kind: brokr_kill\n    at: 10s\n", 27,
     "faults[0].kind", "unknown kind 'brokr_kill' (did you mean 'broker_kill'?)"),
    ("fault on unknown consumer group", BASE
     + "faults:\n  - kind: consumer_crash\n    at: 10s\n    target: cc\n", 29,
     "faults[0].target", "unknown consumer group 'cc' (did you mean 'c'?)"),
    ("toxic missing its field", BASE + "faults:\n  - kind: latency\n    at: 10s\n    duration: 5s\n",
     27, "faults[0]", "toxic 'latency' needs latency"),
    ("toxic with a foreign field", BASE
     + "faults:\n  - kind: bandwidth\n    at: 1s\n    duration: 5s\n    rate: 1MB\n    latency: 5ms\n",
     27, "faults[0]", "toxic 'bandwidth' does not take latency"),
    ("pause without duration", BASE + "faults:\n  - kind: broker_pause\n    at: 10s\n", 27,
     "faults[0]", "broker_pause needs a positive duration"),
    ("duplicate key", replace("warmup: 5s", "warmup: 5s\nwarmup: 6s"), 4, "warmup",
     "duplicate key 'warmup' (first defined on line 3)"),
    ("duplicate queue name", replace("    - name: alarms", "    - name: work"), 12,
     "topology.queues[1].name", "duplicate queue name 'work'"),
    ("binding to unknown exchange", replace("exchange: prices", "exchange: price"), 14,
     "topology.queues[1].bindings[0].exchange", "exchange 'price' is not declared (did you mean 'prices'?)"),
    ("bad topic pattern", replace('key: "Alarm.*"', 'key: "Alarm.*x"'), 15,
     "topology.queues[1].bindings[0].key", "wildcard inside word '*x'"),
    ("warmup longer than run", replace("warmup: 5s", "warmup: 90s"), 3, "warmup",
     "warmup 90s must be shorter than duration 60s"),
    ("failure probability of 1", replace("    prefetch: 10", "    prefetch: 10\n    failure_probability: 1.0"),
     25, "consumers[0].failure_probability", "less than 1"),
    ("stomp client on rabbitmq", replace("  kind: rabbitmq", "  kind: rabbitmq\n  client: stomp"), 6,
     "broker.client", "client 'stomp' talks to ActiveMQ"),
    ("quorum queue not durable", replace("    - name: work\n", "    - name: work\n      type: quorum\n      durable: false\n"),
     13, "topology.queues[0].durable", "a quorum queue must be durable"),
    ("producer with queue and exchange", replace("    queue: work\n    arrival", "    queue: work\n    exchange: prices\n    arrival"),
     17, "producers[0]", "give exactly one of 'queue' or 'exchange'"),
    ("wildcard in a published key", replace("    queue: work\n    arrival", "    exchange: prices\n    routing_key: Alarm.#\n    arrival"),
     19, "producers[0].routing_key", "routing key 'Alarm.#' contains a wildcard"),
    ("mmpp lengths differ", replace("{kind: poisson, rate: 10/s}", "{kind: mmpp, rates: [1/s, 5/s], mean_sojourns: [1s, 2s, 3s]}"),
     19, "producers[0].arrival", "rates has 2 entries but mean_sojourns has 3"),
    ("autoscaling target unknown", BASE
     + "autoscaling:\n  - policy: target_tracking\n    target: workers\n    target_value: 100\n",
     28, "autoscaling[0].target", "autoscaling target 'workers' is not a consumer group"),
    ("autoscaling min above max", BASE
     + "autoscaling:\n  - policy: target_tracking\n    target: c\n    target_value: 100\n"
     "    min_replicas: 5\n    max_replicas: 2\n", 27, "autoscaling[0]",
     "min_replicas (5) > max_replicas (2)"),
    ("autoscaled group starts outside its bounds", BASE
     + "autoscaling:\n  - policy: target_tracking\n    target: c\n    target_value: 100\n"
     "    min_replicas: 3\n    max_replicas: 5\n", 28, "autoscaling[0].target",
     "group 'c' starts 2 consumers, outside [min_replicas 3, max_replicas 5]"),
    ("autoscaling metric typo", BASE
     + "autoscaling:\n  - policy: target_tracking\n    target: c\n    target_value: 100\n"
     "    metric: queue_lenght\n", 30, "autoscaling[0].metric", "did you mean 'queue_length'?"),
    ("unknown distribution kind", replace("kind: exponential", "kind: exponentail"), 25,
     "consumers[0].service_time.kind", "did you mean 'exponential'?"),
    ("distribution with foreign field", replace("{kind: exponential, mean: 5ms}", "{kind: exponential, mean: 5ms, k: 3}"),
     25, "consumers[0].service_time.k", "unknown field 'k'"),
    ("not a mapping", "- just\n- a list\n", 1, "", "a scenario must be a mapping of fields, got a list"),
    ("broken yaml", "name: x\nduration: [60s\n", 3, "", "not valid YAML"),
    ("missing producers", "name: x\nduration: 10s\n", 1, "producers", "required field is missing"),
    ("python tag on a value", replace("prefetch: 10", "prefetch: !!python/object:os.system {}"), 24,
     "consumers[0].prefetch", "tag 'tag:yaml.org,2002:python/object:os.system' is not allowed"),
    ("integer beyond 64 bits", replace("prefetch: 10", "prefetch: " + "9" * 30), 24,
     "consumers[0].prefetch", "integer is too large"),
    ("infinite float", replace("prefetch: 10", "prefetch: .inf"), 24, "consumers[0].prefetch",
     "number '.inf' is not finite"),
    ("recursive alias", BASE + "x: &x [*x]\n", 26, "x[0]", "recursive alias"),
    ("merge of a scalar", replace("    prefetch: 10", "    <<: 10"), 24, "consumers[0]",
     "a merge key '<<' takes a mapping"),
    ("nested too deep", BASE + "x: " + "[" * 70 + "]" * 70 + "\n", 26, "", "nested more than 64"),
    ("control character", BASE + "x: \x07\n", 26, "", "not valid YAML"),
    ("steps not increasing", replace("{kind: poisson, rate: 10/s}", "{kind: steps, steps: [{at: 5s, rate: 1/s}, {at: 2s, rate: 3/s}]}"),
     19, "producers[0].arrival.steps", "step times must increase: 2s follows 5s"),
]
# fmt: on


@pytest.mark.parametrize(
    ("doc", "line", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_located(doc: str, line: int, path: str, fragment: str) -> None:
    errs = errors(doc)
    assert errs, "expected an error"
    matching = [e for e in errs if e[1] == path and fragment in e[2]]
    assert matching, f"no error at {path!r} containing {fragment!r}; got {errs}"
    assert matching[0][0] == line, f"line {matching[0][0]} != {line} for {matching[0]}"


def test_at_least_25_cases() -> None:
    assert len(CASES) >= 25


def test_all_errors_reported_together() -> None:
    doc = replace("kind: poisson", "kind: poison").replace("prefetch: 10", "prefetchh: 10")
    errs = errors(doc)
    assert {e[1] for e in errs} >= {"producers[0].arrival.kind", "consumers[0].prefetchh"}


def test_unstable_configuration_warns_with_utilisation() -> None:
    doc = replace("rate: 10/s", "rate: 500/s")  # 500/s against 2 × 200/s
    scenario, issues = parse_scenario(doc, "s.yaml")
    assert scenario is not None
    warns = [i for i in issues if i.severity == "warning"]
    assert len(warns) == 1
    assert "utilisation ρ = 1.25" in warns[0].message and "overload: true" in warns[0].message
    assert warns[0].path == "consumers[0].service_time.mean"  # the field, not the queue
    marked = parse_scenario(doc + "overload: true\n", "s.yaml")[1]
    assert [i for i in marked if i.severity == "warning"] == []


def test_cli_validate_prints_located_errors_and_exits_3(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(replace("kind: poisson", "kind: poison"))
    result = CliRunner().invoke(app, ["validate", str(f)])
    assert result.exit_code == 3  # a scenario error (testbed.cli.exit_codes)
    assert (
        f"{f}:19: producers[0].arrival.kind: unknown kind 'poison' (did you mean 'poisson'?)"
        in (result.output)
    )


def test_cli_validate_ok_and_json(tmp_path: Path) -> None:
    f = tmp_path / "good.yaml"
    f.write_text(BASE)
    result = CliRunner().invoke(app, ["validate", "--json", str(f)])
    assert result.exit_code == 0, result.output
    assert '"ok": true' in result.output


def test_missing_file() -> None:
    scenario, issues = validate_file("/nonexistent/x.yaml")
    assert scenario is None and issues[0].message == "no such file"
    assert str(issues[0]) == "/nonexistent/x.yaml:1: no such file"


def test_merge_key_own_keys_win() -> None:
    doc = replace(
        "    service_time: {kind: exponential, mean: 5ms}", "    <<: {count: 5, ack: auto}"
    )
    doc = doc.replace(
        "  - name: c\n", "  - name: c\n    service_time: {kind: exponential, mean: 5ms}\n"
    )
    scenario, issues = parse_scenario(doc, "s.yaml")
    assert scenario is not None, [str(i) for i in issues]
    assert (scenario.consumers[0].count, scenario.consumers[0].ack) == (2, "auto")


def test_cli_validate_keeps_going_after_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader bug on one file is reported on that file; the others are still checked."""
    import testbed.core.scenario_loader as loader

    real = loader.validate_file

    def flaky(path: Path) -> object:
        if Path(path).name == "boom.yaml":
            raise RuntimeError("[bold]:x:")
        return real(path)

    monkeypatch.setattr(loader, "validate_file", flaky)
    for name in ("a.yaml", "boom.yaml", "c.yaml"):
        (tmp_path / name).write_text(BASE)
    files = [str(tmp_path / n) for n in ("a.yaml", "boom.yaml", "c.yaml")]
    result = CliRunner().invoke(app, ["validate", *files])
    assert result.exit_code == 3  # a scenario error (testbed.cli.exit_codes)
    assert f"ok: {files[0]}" in result.output and f"ok: {files[2]}" in result.output
    assert f"{files[1]}:1: internal error while checking this file (RuntimeError: [bold]:x:)" in (
        result.output
    )


def test_trace_file_resolved_relative_to_scenario(tmp_path: Path) -> None:
    (tmp_path / "times.csv").write_text("t\n0.5\n1.0\n1.25\n")
    doc = replace("{kind: poisson, rate: 10/s}", "{kind: trace, file: times.csv}")
    (tmp_path / "s.yaml").write_text(doc)
    scenario, issues = validate_file(tmp_path / "s.yaml")
    assert scenario is not None, issues
    assert scenario.producers[0].arrival.times == [0.5, 1.0, 1.25]
    (tmp_path / "times.csv").write_text("t\n1.0\n0.5\n")
    scenario, issues = validate_file(tmp_path / "s.yaml")
    assert scenario is None
    assert "times must not decrease (0.5 after 1)" in issues[0].message


def test_yaml_boolean_words_as_keys_stay_names() -> None:
    """`on:` is a key (follow-up filter), not YAML 1.1's boolean True."""
    doc = BASE.replace(
        "    service_time: {kind: exponential, mean: 5ms}\n",
        "    service_time: {kind: exponential, mean: 5ms}\n"
        "    follow_ups: [{on: p, message_type: Ack, queue: alarms}]\n",
    )
    scenario, issues = parse_scenario(doc, "s.yaml")
    assert scenario is not None, [str(i) for i in issues]
    assert scenario.consumers[0].follow_ups[0].on == "p"


def test_closed_producer_without_confirms_warns_except_on_a_shared_lock() -> None:
    from testbed.core.scenario_loader import parse_scenario

    text = """
name: closed
duration: 10s
broker: {{kind: rabbitmq{model}}}
topology: {{queues: [{{name: q}}]}}
producers:
  - {{name: p, queue: q, arrival: {{kind: closed, think_time: {{kind: deterministic, value: 1ms}}}}}}
"""
    for model, warned in (("", True), (", model: shared_lock", False)):
        scenario, issues = parse_scenario(text.format(model=model))
        assert scenario is not None, issues
        socket = [i for i in issues if "blocks only until the socket write" in str(i)]
        assert bool(socket) is warned, (model, issues)


def test_the_schema_does_not_import_its_loader_and_the_loader_returns_a_scenario() -> None:
    """No cycle between `testbed.core.scenario` and `testbed.core.scenario_loader`: the schema
    module loads alone, and `load_scenario` is typed by the schema it imports."""
    import subprocess
    import sys
    import typing

    from testbed.core import scenario_loader
    from testbed.core.scenario import Scenario

    code = (
        "import sys, testbed.core.scenario\n"
        "assert 'testbed.core.scenario_loader' not in sys.modules, 'the schema imports its loader'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert typing.get_type_hints(scenario_loader.load_scenario)["return"] is Scenario
