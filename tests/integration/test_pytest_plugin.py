"""The pytest plugin as a user meets it: user-style suites, run by `pytester` in a child process
(in-process, pytester would unload the modules the user's run imported), asserting live runs
on the local backend:

- on the session's RabbitMQ, found in its home and left running: one run of two seconds
  without prediction and analysis, judged by thresholds;
- on a fresh home, where the plugin starts its own RabbitMQ and stops it when the user's
  session ends: one run of two seconds with its paired prediction and Spark analysis, judged
  by `assert_verdicts` (the assertions' tables are in tests/unit/test_pytest_plugin.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.backends.procs import start_ticks
from tests.plugin_suite import TINY, plugin_args

pytestmark = pytest.mark.integration
pytest_plugins = ["pytester"]

USER_SUITE = """
import json

from testbed.pytest_plugin import assert_thresholds


def test_orders_flow(mqbed_broker, mqbed_run):
    assert mqbed_broker.port == {port}  # the broker already running in the home
    result = mqbed_run("tiny.yaml", rate="60/s", predict=False, report=False)
    env = json.loads((result.run_dir / "environment.json").read_text())
    assert env["broker"]["name"] == {name!r} and env["interrupted"] is False
    assert result.backend == "local" and result.summary is None
    assert (result.run_dir / "measured" / "deliveries.parquet").is_file()
    print("mqbed ledger:", result.ledger)
    assert_thresholds(result, "lost == 0", "duplicated == 0", "sent >= 100", "sent < 1")
"""


def test_user_suite_on_the_local_backend(
    pytester: pytest.Pytester, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    pytester.makefile(".yaml", tiny=TINY)
    pytester.makepyfile(test_user=USER_SUITE.format(port=rabbitmq.port, name=rabbitmq.name))
    result = pytester.runpytest_subprocess(
        *plugin_args(), f"--mqbed-home={local_backend.home}", "-rA", timeout=240
    )
    out = result.stdout.str()
    result.assert_outcomes(failed=1)  # only the threshold written to fail, with its table
    assert "1 of 4 threshold(s) missed by run" in out, out
    for line in ("✓ lost == 0", "✓ duplicated == 0", "✓ sent >= 100", "✗ sent < 1"):
        assert line in out, out
    assert "mqbed ledger: Ledger(sent=" in out
    assert local_backend.is_healthy(rabbitmq.name)  # not the plugin's to stop


OWN_BROKER_SUITE = """
import json
from pathlib import Path

from testbed.backends.procs import start_ticks
from testbed.pytest_plugin import assert_verdicts

# Generous accuracy targets: two seconds of 20 msg/s judge the pipeline (a prediction, an
# analysis, judged rows), not the model, which the accuracy gate judges on longer runs.
LOOSE = {{"accuracy.throughput": 0.5, "accuracy.latency_mean": 5.0, "accuracy.latency_p50": 5.0,
         "accuracy.latency_p95": 5.0, "accuracy.latency_p99": 5.0, "accuracy.latency_ks": 1.0,
         "accuracy.latency_w1": 50.0, "accuracy.queue_depth_mean": 50.0}}


def test_predicted_and_judged(mqbed_broker, mqbed_run, mqbed_testbed):
    state = json.loads((Path({home!r}) / "state.json").read_text())
    epmd = [state["epmd"]] if state.get("epmd") else []  # the home's own epmd, when it has one
    processes = [n["process"] for n in state["nodes"]] + epmd
    assert [n["name"] for n in state["nodes"]] == [mqbed_broker.name]
    assert mqbed_broker.pid == processes[0]["pid"]
    for p in processes:
        assert start_ticks(p["pid"]) == p["start_ticks"]  # running now
    print("mqbed processes:", json.dumps([(p["pid"], p["start_ticks"]) for p in processes]))
    result = mqbed_run("tiny.yaml", rate="20/s", set=LOOSE)
    assert result.summary is not None and result.report.is_file()
    judged = [r for r in result.verdicts if r.queue == "all" and r.within is not None]
    assert len(judged) >= 5, result.verdict_table()
    print(result.verdict_table())
    assert_verdicts(result)
"""


def test_plugin_starts_and_stops_its_own_broker_and_judges_a_prediction(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    home = tmp_path / "fresh-home"  # nothing running there: the plugin starts the broker
    pytester.makefile(".yaml", tiny=TINY)
    pytester.makepyfile(test_user=OWN_BROKER_SUITE.format(home=str(home)))
    result = pytester.runpytest_subprocess(
        *plugin_args(), f"--mqbed-home={home}", "-rA", "-s", timeout=420
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=1)
    assert "mqbed: local rabbitmq ready" in out + result.stderr.str()
    assert "Prediction accuracy:" in out and "✓" in out, out
    line = next(x for x in out.splitlines() if "mqbed processes:" in x)  # -s: after the dots
    processes = json.loads(line.split("mqbed processes:", 1)[1])
    assert processes  # the RabbitMQ node (and the home's epmd)
    for pid, ticks in processes:  # gone: no such PID, or a new process that reused it
        assert start_ticks(pid) != ticks, f"process {pid} of the plugin's broker still runs"
    state = home / "state.json"
    left = json.loads(state.read_text())["nodes"] if state.is_file() else []
    assert all(n["process"] is None or start_ticks(n["process"]["pid"]) is None for n in left)
    assert os.path.isdir(home)  # the home stays (the user's, as ini mqbed_home or the option)
