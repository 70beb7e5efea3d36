"""The warm-up of a freshly started JVM broker (`testbed.backends.warm_up`).

A fresh ActiveMQ delivers twice as slowly until HotSpot has compiled its message path, so every
backend that starts one sends it `KindFacts.warm_up` messages through a scratch queue first;
RabbitMQ needs none. How much faster a warm broker is, is a benchmark's matter
(docs/models.md §9a); these tests hold what the warm-up does and leaves behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.backends.warm_up import WARM_QUEUE, warm_up
from testbed.brokers import make_adapter
from testbed.cli.app import app
from testbed.core.broker_kinds import KINDS
from testbed.exceptions import BackendError

pytestmark = pytest.mark.integration


def _left_in_scratch_queue(ep: BrokerEndpoint) -> int:
    adapter = make_adapter(ep, None)
    adapter.connect()
    try:
        consumer = adapter.consumer(WARM_QUEUE, prefetch=100)
        got = consumer.drain(1.0)
        for d in got:
            d.ack()
        consumer.close()
        return len(got)
    finally:
        adapter.close()


def test_a_started_activemq_is_warmed_up_and_rabbitmq_is_not(
    local_backend: LocalBackend, rabbitmq: BrokerEndpoint, activemq: BrokerEndpoint
) -> None:
    done = local_backend.warmed[activemq.name]  # the session fixture started both
    assert done.sent == done.received == KINDS["activemq"].warm_up == 30_000
    assert 0 < done.seconds < 60
    assert rabbitmq.name not in local_backend.warmed and KINDS["rabbitmq"].warm_up == 0
    assert warm_up(rabbitmq).sent == 0  # nothing to do: no STOMP connection is even tried
    assert _left_in_scratch_queue(activemq) == 0


def test_no_warm_up_when_asked_and_a_warm_up_by_hand(
    fresh_backend: Callable[[str], LocalBackend],
) -> None:
    backend = fresh_backend("cold")
    (ep,) = backend.up(["activemq"], detach=False, warm=False)
    assert backend.warmed == {}
    done = warm_up(ep, messages=300)
    assert (done.sent, done.received) == (300, 300)
    assert _left_in_scratch_queue(ep) == 0
    bad = replace(ep, password="wrong")
    with pytest.raises(BackendError) as e:
        warm_up(bad, messages=10)
    assert "warm-up of activemq0" in str(e.value)


def test_mqbed_up_reports_the_warm_up_and_no_warm_up_skips_it(tmp_path: Path) -> None:
    """The README's `mqbed up` (warm by default) and `mqbed up --no-warm-up`, on the CLI."""
    runner = CliRunner()
    cold = ["up", "--broker", "activemq", "--no-warm-up", "--json", "--home", str(tmp_path / "c")]
    warm = ["up", "--broker", "activemq", "--json", "--home", str(tmp_path / "w")]
    try:
        result = runner.invoke(app, cold)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["warm_up"] == {}
        result = runner.invoke(app, warm)
        assert result.exit_code == 0, result.output
        done = json.loads(result.stdout)["warm_up"]["activemq0"]
        assert done["sent"] == done["received"] == 30_000
    finally:
        for home in ("c", "w"):
            runner.invoke(app, ["down", "--home", str(tmp_path / home)])
