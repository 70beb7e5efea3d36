"""mqbed as a pytest plugin: live broker runs and their verdicts inside your own test suite.

Registered under the ``pytest11`` entry point ``mqbed`` (``-p mqbed``; disable with
``-p no:mqbed``). Everything it adds is prefixed ``mqbed``::

    from testbed.pytest_plugin import assert_thresholds, assert_verdicts

    def test_orders_keep_up(mqbed_run):
        result = mqbed_run("workloads/scenarios/quickstart.yaml", rate="150/s", duration=5)
        assert_thresholds(result, "p95 < 50ms", "lost == 0")
        assert_verdicts(result)          # the paired prediction matched the run

Fixtures:

- ``mqbed_run(scenario, **overrides)`` → `MqbedResult` (run directory, ledger, summary,
  verdicts): one live run (`testbed.run.run_scenario`) plus its Spark analysis; `scenario` is a
  file (relative to the working directory, else to pytest's rootdir) or its data as a mapping;
  overrides in `testbed.pytest_plugin.runs`.
- ``mqbed_broker``: a running broker's `BrokerEndpoint` (kind from the ``mqbed`` marker,
  default rabbitmq), shared by the session; runs use the same broker.
- ``mqbed_testbed``: the session's `Testbed` (brokers, Spark), closed at the end.

Where brokers run (the ``mqbed`` marker's ``backend``, else ``--mqbed-backend``, else the ini
option ``mqbed_backend``): ``local`` (default; the local backend), ``testcontainers`` (a
container started through testcontainers on the Docker engine of ``$DOCKER_HOST``; failing
when none answers), or ``auto`` (testcontainers when an engine answers, else local).

Ini options: ``mqbed_home`` (testbed home: brokers' files, calibration cache; default a fresh
directory of the session), ``mqbed_calibration`` (the prediction's profile: ``cached``
(default: this home's cached profile, else the shipped one; never calibrates), ``auto``,
``fresh``, ``shipped``), ``mqbed_startup_timeout`` (seconds, default 120).
"""

from __future__ import annotations

__all__ = ["MqbedResult", "Testbed", "assert_thresholds", "assert_verdicts", "parse_threshold"]

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

MARKER = "mqbed"
BACKEND_CHOICES = ("local", "testcontainers", "auto")
_LAZY = {
    "MqbedResult": "testbed.pytest_plugin.runs",
    "Testbed": "testbed.pytest_plugin.session",
    "assert_thresholds": "testbed.pytest_plugin.asserts",
    "assert_verdicts": "testbed.pytest_plugin.asserts",
    "parse_threshold": "testbed.pytest_plugin.asserts",
}


def __getattr__(name: str) -> Any:
    """The helpers, imported on first use: a session that loads the plugin without using it
    (every pytest run where mqbed is installed) pays nothing for them."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mqbed", "mqbed: live message-broker runs")
    group.addoption(
        "--mqbed-backend",
        choices=BACKEND_CHOICES,
        default=None,
        help="where mqbed fixtures run brokers (overrides the mqbed_backend ini option)",
    )
    group.addoption("--mqbed-home", default=None, help="mqbed testbed home (see mqbed_home)")
    parser.addini("mqbed_backend", "local | testcontainers | auto (default local)", default="local")
    parser.addini(
        "mqbed_home", "testbed home, relative to rootdir (default: a fresh one)", default=""
    )
    parser.addini(
        "mqbed_calibration", "prediction profile: cached | auto | fresh | shipped", default="cached"
    )
    parser.addini("mqbed_startup_timeout", "seconds a broker may take to start", default="120")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; a bad backend in the ini or on the command line stops the
    session before any test (a usage error), not at the first fixture."""
    backend = config.getoption("--mqbed-backend") or str(config.getini("mqbed_backend"))
    if backend not in BACKEND_CHOICES:
        raise pytest.UsageError(f"mqbed_backend = {backend!r}: use one of {BACKEND_CHOICES}")
    config.addinivalue_line(
        "markers",
        f"{MARKER}(backend=None, kind=None): where mqbed fixtures run brokers "
        "(local | testcontainers | auto) and mqbed_broker's kind (rabbitmq | activemq)",
    )


def _marker(request: pytest.FixtureRequest) -> dict[str, Any]:
    mark = request.node.get_closest_marker(MARKER)
    kwargs = dict(mark.kwargs) if mark is not None else {}
    unknown = set(kwargs) - {"backend", "kind"}
    if unknown or (mark is not None and mark.args):
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes backend= and kind= only")
    return kwargs


def _settings(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from testbed.pytest_plugin.session import Settings

    backend = config.getoption("--mqbed-backend") or str(config.getini("mqbed_backend"))
    home_text = config.getoption("--mqbed-home") or str(config.getini("mqbed_home"))
    home = config.rootpath / home_text if home_text else tmp_path_factory.mktemp("mqbed-home")
    try:
        timeout = float(str(config.getini("mqbed_startup_timeout")))
    except ValueError as exc:
        raise pytest.UsageError(f"mqbed_startup_timeout: {exc}") from None
    return Settings(backend, home, str(config.getini("mqbed_calibration")), timeout)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def mqbed_testbed(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The session's brokers and Spark (`testbed.pytest_plugin.session.Testbed`)."""
    from testbed.pytest_plugin.session import Testbed

    testbed = Testbed(_settings(pytestconfig, tmp_path_factory), log=_progress)
    try:
        yield testbed
    finally:
        problems = testbed.close()
        if problems:
            pytest.fail("mqbed could not stop: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def mqbed_broker(request: pytest.FixtureRequest, mqbed_testbed: Any) -> Any:
    """A running broker (`testbed.backends.base.BrokerEndpoint`) of the marker's kind."""
    from testbed.core.broker_kinds import DEFAULT_KIND

    mark = _marker(request)
    return mqbed_testbed.broker(mark.get("kind", DEFAULT_KIND), mark.get("backend"))


@pytest.fixture
def mqbed_run(
    request: pytest.FixtureRequest, mqbed_testbed: Any, tmp_path: Path
) -> Callable[..., Any]:
    """``mqbed_run(scenario, **overrides)`` → `MqbedResult` (see the module docstring)."""
    backend = _marker(request).get("backend")
    root = request.config.rootpath
    calls = [0]

    def run(scenario: str | Path | Mapping[str, Any], /, **overrides: Any) -> Any:
        if not isinstance(scenario, Mapping):
            path = Path(scenario)
            scenario = path if path.exists() or path.is_absolute() else root / path
        calls[0] += 1
        out_dir = tmp_path / f"mqbed-run-{calls[0]}"
        return mqbed_testbed.run(scenario, out_dir, backend=backend, overrides=overrides)

    return run
