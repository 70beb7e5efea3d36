"""Real brokers for integration tests, started by the local backend.

- `local_backend`: one `LocalBackend` in a temporary home for the whole session, owned by this
  process (``detach=False``: the brokers die with pytest, even if it is SIGKILLed); `down()` at
  teardown.
- `rabbitmq`, `activemq`: a `BrokerEndpoint` each, started on first use and shared by every
  integration test of the session.
- `fresh_backend`: a factory of extra `LocalBackend`s in `tmp_path`, for tests that kill,
  restart or tear down brokers; each is brought `down()` after the test.

A broker that cannot start fails the test with the backend's message (log tail included);
nothing is skipped. Start-up times are listed in the terminal summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.exceptions import MqbedError
from tests.conftest import summary_line

STARTUP_SECTION = "broker start-up (launch → healthy)"


def record_startup(label: str, backend: LocalBackend, names: list[str]) -> None:
    """Put `backend`'s latest start-up times of nodes `names` in the terminal summary."""
    for name in names:
        seconds = backend.startup_seconds[name]
        summary_line(STARTUP_SECTION, f"{label:>14}  {name:<10} {seconds:6.2f} s")


def start_or_fail(
    backend: LocalBackend, kinds: list[str], *, label: str, **kwargs: object
) -> list[BrokerEndpoint]:
    """`backend.up(kinds)`, turning any start failure into a test failure with its reason."""
    try:
        endpoints = backend.up(kinds, **kwargs)  # type: ignore[arg-type]
    except MqbedError as exc:
        pytest.fail(f"could not start {kinds} in {backend.home}: {exc}", pytrace=False)
    record_startup(label, backend, [e.name for e in endpoints])
    return endpoints


@pytest.fixture(scope="session")
def local_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    backend = LocalBackend(tmp_path_factory.mktemp("mqbed-home"))
    try:
        yield backend
    finally:
        backend.down()


@pytest.fixture(scope="session")
def rabbitmq(local_backend: LocalBackend) -> BrokerEndpoint:
    (endpoint,) = start_or_fail(local_backend, ["rabbitmq"], label="session", detach=False)
    return endpoint


@pytest.fixture(scope="session")
def activemq(local_backend: LocalBackend) -> BrokerEndpoint:
    (endpoint,) = start_or_fail(local_backend, ["activemq"], label="session", detach=False)
    return endpoint


@pytest.fixture
def fresh_backend(tmp_path: Path) -> Iterator[Callable[[str], LocalBackend]]:
    """``make(name)`` → a new `LocalBackend` with home ``tmp_path/name``; downed afterwards."""
    made: list[LocalBackend] = []

    def make(name: str = "home") -> LocalBackend:
        backend = LocalBackend(tmp_path / name)
        made.append(backend)
        return backend

    yield make
    errors = []
    for backend in made:
        try:
            backend.down()
        except MqbedError as exc:
            errors.append(f"{backend.home}: {exc}")
    if errors:
        pytest.fail("teardown could not stop brokers: " + "; ".join(errors), pytrace=False)
