"""The pytest plugin as a user meets it: a user-style suite, run by `pytester` in a child process
(in-process, pytester would unload the modules the user's run imported), asserting a
live run on the local backend (the session's RabbitMQ, found in its home and left running).

One live run of two seconds, without prediction and analysis (those are the CLI's, tested
elsewhere; the assertions' tables are in tests/unit/test_pytest_plugin.py)."""

from __future__ import annotations

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
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
