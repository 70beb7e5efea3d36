"""The terminal summary, the worker-load lines and the suite's Spark session. The rules (no
skip, no xfail, nothing deselected, the gate last) live in the plugin tests/ci_rules.py, loaded
by ``-p tests.ci_rules`` in pyproject.toml's ``addopts``: a session without it is refused here
(``pytest_configure``), so turning one of the two off (``-p no:tests.ci_rules`` or
``--noconftest``) still leaves a guard, and ``make test`` clears ``PYTEST_ADDOPTS`` besides.

- `summary_line(section, line)`: figures worth reading after a run (broker start-up times, image
  builds) go to a section of the terminal summary. ``make test`` runs the suite in pytest-xdist
  workers; each worker ships its lines to the controller (``workeroutput``), which prints them.
- `spark`: one local Spark session per test process (local[2], loopback only), for every test
  that analyses in-process: `build_report`, `compare_runs` and the CLI commands behind them find
  it running and reuse it (`testbed.analysis.session.spark_scope`). A report built in a fresh
  JVM took 42 s on a run of the accuracy suite, 15 s in a session that had analysed once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
RULES_PLUGIN = "tests.ci_rules"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(RULES_PLUGIN):
        raise pytest.UsageError(
            f"the suite's rules ({RULES_PLUGIN}) are not loaded: they come with "
            f"`-p {RULES_PLUGIN}` in pyproject.toml's addopts; do not block them (-p no:...)"
        )


# -- terminal summary -------------------------------------------------------------------------

SUMMARY: dict[str, list[str]] = {}
"""Terminal-summary lines by section title (this process's, plus every finished worker's)."""


def summary_line(section: str, line: str) -> None:
    SUMMARY.setdefault(section, []).append(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    shipped = getattr(session.config, "workeroutput", None)  # set in xdist workers only
    if shipped is not None:
        shipped["mqbed_summary"] = {k: list(v) for k, v in SUMMARY.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for section, lines in getattr(node, "workeroutput", {}).get("mqbed_summary", {}).items():
        SUMMARY.setdefault(section, []).extend(lines)


# -- worker load: where the suite's wall time goes ---------------------------------------------

STARTED = time.monotonic()
LOAD: dict[str, list[float]] = {}
"""Per xdist worker (``main`` without xdist), as the controller sees its reports: [seconds in
tests, tests, monotonic time of its last report]."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _account(report)


def _account(report: pytest.TestReport) -> None:
    node = getattr(report, "node", None)  # set by xdist on the controller's copy
    worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
    entry = LOAD.setdefault(worker, [0.0, 0.0, 0.0])
    entry[0] += report.duration
    entry[1] += report.when == "call"
    entry[2] = time.monotonic()


def _load_lines() -> list[str]:
    """One line per worker: busy seconds and how long it sat idle at the end (a long pinned
    group scheduled last shows here as the other worker's idle tail)."""
    end = time.monotonic()
    return [
        f"{worker:>5}  {int(n):4d} tests  {busy:7.0f} s in tests  "
        f"last report at {last - STARTED:6.0f} s of {end - STARTED:.0f} s "
        f"(idle {end - last:.0f} s at the end)"
        for worker, (busy, n, last) in sorted(LOAD.items())
    ]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LOAD:
        SUMMARY.setdefault("worker load", []).extend(_load_lines())
    for section, lines in SUMMARY.items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test process's Spark session, stopped (JVM included) when the session ends."""
    from testbed.analysis.session import spark_session, stop_spark  # pyspark: only when used

    session = spark_session("local[2]", app_name="mqbed-tests", driver_memory="1g")
    try:
        yield session
    finally:
        stop_spark(session)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests keep files worth looking at after a run (screenshots, reports)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
