"""The pytest plugin without brokers: its entry point, options and marker (on `pytester` runs),
the scenario overrides of ``mqbed_run``, and the assertions' readable failures.

Live runs through the plugin: tests/integration/test_pytest_plugin.py (local backend) and
tests/docker/test_pytest_plugin_docker.py (testcontainers)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.core.records import Ledger
from testbed.core.scenario_loader import load_scenario
from testbed.exceptions import ConfigurationError, MqbedError
from testbed.pytest_plugin import assert_thresholds, assert_verdicts, parse_threshold
from testbed.pytest_plugin.containers import broker_url
from testbed.pytest_plugin.runs import MqbedResult, apply_overrides, scenario_copy
from testbed.pytest_plugin.session import Settings, Testbed
from tests.plugin_suite import PLUGIN, TINY, plugin_args

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]


# -- entry point, options, marker ------------------------------------------------------------


def test_entry_point_is_declared_and_loads_the_plugin(pytester: pytest.Pytester) -> None:
    """pyproject.toml declares ``mqbed = testbed.pytest_plugin`` under ``pytest11``; a
    distribution carrying exactly that declaration makes pytest load the plugin by itself."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["pytest11"]
    assert declared == {"mqbed": PLUGIN}
    site = pytester.mkdir("site")
    info = site / "mqbed_plugin_probe-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mqbed-plugin-probe\nVersion: 0.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items())
    )
    pytester.syspathinsert(site)
    pytester.makepyfile(
        "def test_fixture(mqbed_testbed):\n    assert mqbed_testbed.settings.backend == 'local'\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")  # no -p for the plugin itself
    result.assert_outcomes(passed=1)
    help_text = pytester.runpytest("--help").stdout.str()
    assert "--mqbed-backend={local,testcontainers,auto}" in help_text
    assert "mqbed_calibration" in help_text


def test_backend_from_ini_cli_and_marker(pytester: pytest.Pytester) -> None:
    """The command line beats the ini option; the marker (registered: ``--strict-markers``
    accepts it) reaches the fixtures, which check it; home is relative to rootdir."""
    pytester.makeini("[pytest]\nmqbed_backend = testcontainers\nmqbed_home = here/.mqbed\n")
    pytester.makepyfile(
        """
        import pytest

        def test_settings(mqbed_testbed, pytestconfig):
            s = mqbed_testbed.settings
            assert s.backend == "local"  # --mqbed-backend beats the ini option
            assert s.home == pytestconfig.rootpath / "here" / ".mqbed"
            assert s.calibration == "cached" and s.startup_timeout == 120.0

        @pytest.mark.mqbed(backend="nonsense", kind="activemq")
        def test_marker(mqbed_broker):
            pass
        """
    )
    result = pytester.runpytest(*plugin_args(), "--strict-markers", "--mqbed-backend=local")
    result.assert_outcomes(passed=1, errors=1)
    assert "mqbed backend 'nonsense': expected one of local, testcontainers, auto" in (
        result.stdout.str()
    )


def test_auto_backend_follows_the_docker_engine(tmp_path: Path) -> None:
    """``auto``: testcontainers when a Docker engine answers, else local; a marker's backend
    beats the settings'."""
    for answer, expected in (("no engine at x", "local"), (None, "testcontainers")):
        testbed = Testbed(Settings(backend="auto", home=tmp_path))
        testbed._docker_error = answer  # what docker_engine_error() found
        assert testbed.resolve(None) == expected
        assert testbed.resolve("local") == "local"
    testbed = Testbed(Settings(backend="testcontainers", home=tmp_path))
    testbed._docker_error = "no Docker engine answers at unix:///nowhere"
    with pytest.raises(MqbedError, match="testcontainers backend needs a Docker engine: no"):
        testbed.broker("rabbitmq")


def test_bad_ini_and_bad_marker_are_usage_errors(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.mqbed("rabbitmq")
        def test_marker(mqbed_broker):
            pass
        """
    )
    result = pytester.runpytest(*plugin_args(), "-o", "mqbed_backend=kubernetes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "mqbed_backend = 'kubernetes': use one of" in result.stderr.str()
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(errors=1)
    assert "@pytest.mark.mqbed takes backend= and kind= only" in result.stdout.str()


# -- overrides -------------------------------------------------------------------------------

DATA: dict[str, Any] = yaml.safe_load(TINY)


def test_overrides_change_a_copy() -> None:
    out = apply_overrides(
        DATA,
        {"rate": "300/s", "duration": 5, "producers": 3, "consumers": {"workers": 2},
         "set": {"consumers[workers].prefetch": 50, "broker.kind": "activemq"}},
    )  # fmt: skip
    assert out["producers"][0]["arrival"]["rate"] == "300/s"
    assert out["producers"][0]["count"] == 3 and out["consumers"][0]["count"] == 2
    assert out["duration"] == 5 and out["consumers"][0]["prefetch"] == 50
    assert out["broker"]["kind"] == "activemq"
    assert DATA["producers"][0]["arrival"]["rate"] == "20/s"  # the original is untouched
    assert DATA["duration"] == "2s"


def test_override_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match="unknown override 'rates'"):
        apply_overrides(DATA, {"rates": 5})
    with pytest.raises(ConfigurationError, match=r"no consumers group named \['nobody'\]"):
        apply_overrides(DATA, {"consumers": {"nobody": 2}})
    closed = apply_overrides(DATA, {"set": {"producers[0].arrival": {"kind": "closed"}}})
    with pytest.raises(ConfigurationError, match="arrival 'closed' without a rate"):
        apply_overrides(closed, {"rate": 10})


def test_scenario_copy_keeps_trace_files_and_validates(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "traces").mkdir(parents=True)
    (src / "traces" / "t.csv").write_text("t\n0.1\n0.2\n0.35\n")
    data = apply_overrides(DATA, {"set": {"producers[0].arrival": {"kind": "trace",
                                                                  "file": "traces/t.csv"}}})  # fmt: skip
    (src / "s.yaml").write_text(yaml.safe_dump(data))
    copy = scenario_copy(src / "s.yaml", tmp_path / "out", {"duration": 4})
    scenario = load_scenario(copy)  # the trace is found beside the copy
    assert scenario.duration == 4.0
    assert scenario.producers[0].arrival.times == [0.1, 0.2, 0.35]
    with pytest.raises(ConfigurationError, match="not found"):
        scenario_copy(src / "missing.yaml", tmp_path / "out2", {})


def test_broker_url_for_the_external_backend() -> None:
    from testbed.backends.base import BrokerEndpoint
    from testbed.backends.external import parse_broker_urls

    ep = BrokerEndpoint("rabbitmq", "x", "127.0.0.1", 5999, "u@1", "p/ss:w",
                        management_url="http://127.0.0.1:6000")  # fmt: skip
    (back,) = parse_broker_urls([broker_url(ep)])
    assert (back.port, back.username, back.password) == (5999, "u@1", "p/ss:w")
    assert back.management_url == "http://127.0.0.1:6000"
    amq = BrokerEndpoint("activemq", "y", "127.0.0.1", 61999, "a", "b")
    assert parse_broker_urls([broker_url(amq)])[0].kind == "activemq"


# -- assertions ------------------------------------------------------------------------------


def _entry(metric: str, measured: float, predicted: float | None, within: bool | None,
           queue: str | None = None) -> dict[str, Any]:  # fmt: skip
    err = None if predicted is None else (predicted - measured) / measured
    return {"metric": metric, "queue": queue, "measured": measured,
            "measured_ci": [measured * 0.9, measured * 1.1], "predicted": predicted,
            "rel_error": err, "within_target": within, "target_kind": "abs_rel_error",
            "target": 0.15}  # fmt: skip


def _result(tmp_path: Path, summary: dict[str, Any] | None) -> MqbedResult:
    ledgers = [Ledger(sent=100, lost=0), Ledger(sent=120, lost=2, duplicated=1)]
    return MqbedResult(tmp_path / "20260101T000000Z-demo", tmp_path / "s.yaml", "local",
                       ledgers, summary, tmp_path / "report.html")  # fmt: skip


SUMMARY = {
    "scenario": "demo",
    "verdict": {"status": "fail", "within": 1, "judged": 2},
    "metrics": [
        _entry("throughput_msg_s", 200.0, 198.0, True),
        _entry("latency_p95_s", 0.040, 0.080, False),
        _entry("latency_p95_s", 0.120, 0.130, True, queue="work"),
    ],
}


def test_parse_threshold_is_the_scenarios_parser() -> None:
    from testbed.core import thresholds

    assert parse_threshold is thresholds.parse_threshold  # one grammar for scenario and plugin
    t = parse_threshold("work: p99 <= 1.5s")
    assert (t.queue, t.spec.key, t.op, t.limit) == ("work", "latency_p99_s", "<=", 1.5)
    assert parse_threshold("throughput>=3000/min").limit == 50.0
    with pytest.raises(ValueError, match="whole run only"):
        parse_threshold("work: sent > 1")


def test_assert_thresholds_passes_and_fails_with_a_table(tmp_path: Path) -> None:
    result = _result(tmp_path, SUMMARY)
    assert result.ledger.sent == 220 and result.ledger.lost == 2  # summed over replications
    assert_thresholds(result, "p95 < 50ms", "work: p95 < 150ms", "throughput >= 190/s")
    with pytest.raises(AssertionError) as info:
        assert_thresholds(result, ["p95 < 50ms", "lost == 0", "duplicated <= 1", "p50 < 1s"])
    text = str(info.value)
    assert "2 of 4 threshold(s) missed by run 20260101T000000Z-demo" in text
    assert "✓ p95 < 50ms       measured 40 ms" in text
    assert "✗ lost == 0        measured 2" in text
    assert "✓ duplicated <= 1  measured 1" in text
    assert "✗ p50 < 1s         measured not measured" in text  # no figure: missed, not passed
    no_analysis = _result(tmp_path, None)
    assert_thresholds(no_analysis, "sent > 200")  # ledger counts need no analysis
    with pytest.raises(ValueError, match="need the run's analysis"):
        assert_thresholds(no_analysis, "p95 < 1s")


def test_assert_verdicts_shows_the_verdict_table(tmp_path: Path) -> None:
    result = _result(tmp_path, SUMMARY)
    with pytest.raises(AssertionError) as info:
        assert_verdicts(result)
    text = str(info.value)
    assert "1 of 2 judged metric(s) outside their target: latency p95" in text
    assert "demo — Prediction accuracy: 1 of 2 metrics within target" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("latency p95"))
    assert row.split()[3:] == ["40", "36–44", "80", "+100.0%", "±15%", "✗"]
    assert f"report: {tmp_path / 'report.html'}" in text
    assert_verdicts(result, metrics=["throughput"])  # only the named ones are judged
    with pytest.raises(ValueError, match="no metric"):
        assert_verdicts(result, metrics=["latency_p42_s"])
    unjudged = {**SUMMARY, "metrics": [_entry("throughput_msg_s", 200.0, None, None)]}
    with pytest.raises(AssertionError, match="nothing was judged"):
        assert_verdicts(_result(tmp_path, unjudged))
    with pytest.raises(AssertionError, match="was not analysed"):
        assert_verdicts(_result(tmp_path, None))
