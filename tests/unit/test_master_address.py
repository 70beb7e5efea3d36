"""Where the Locust master of a run with external workers listens, and what the rendezvous
file tells the workers: `mqbed run --master-bind-host/--master-bind-port/--master-advertise`
(or their environment variables) to the launcher."""

from __future__ import annotations

import pytest

from testbed.cli.cmd_run import _master_address
from testbed.workload.launcher import (
    ENV_MASTER_ADVERTISE,
    ENV_MASTER_HOST,
    ENV_MASTER_PORT,
    master_address,
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_MASTER_HOST, ENV_MASTER_PORT, ENV_MASTER_ADVERTISE):
        monkeypatch.setenv(name, "")  # records the original, restored after the test even
        monkeypatch.delenv(name)  # when the code under test sets os.environ itself


def test_default_is_loopback_and_advertised_as_bound() -> None:
    assert master_address() == ("127.0.0.1", "127.0.0.1")


def test_a_bound_address_is_advertised_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV_MASTER_HOST, "127.0.0.2")
    assert master_address() == ("127.0.0.2", "127.0.0.2")
    monkeypatch.setenv(ENV_MASTER_ADVERTISE, "127.0.0.3")
    assert master_address() == ("127.0.0.2", "127.0.0.3")


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_is_never_advertised(monkeypatch: pytest.MonkeyPatch, wildcard: str) -> None:
    """Workers cannot connect to 0.0.0.0: without an advertised address the rendezvous says
    null and each worker service needs its own --master-host."""
    monkeypatch.setenv(ENV_MASTER_HOST, wildcard)
    assert master_address() == (wildcard, None)


def test_the_cli_options_reach_the_launcher() -> None:
    import os

    _master_address("127.0.0.2", 41234, None)
    assert os.environ[ENV_MASTER_HOST] == "127.0.0.2"
    assert os.environ[ENV_MASTER_PORT] == "41234"
    assert ENV_MASTER_ADVERTISE not in os.environ  # not given: not set
    assert master_address() == ("127.0.0.2", "127.0.0.2")
