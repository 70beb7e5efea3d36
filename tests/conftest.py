"""Suite-wide rules and the terminal summary.

- With CI=true no test may skip (a missing service is a failure).
- `summary_line(section, line)`: figures worth reading after a run (broker start-up times, image
  builds) go to a section of the terminal summary. ``make test`` runs the suite in pytest-xdist
  workers; each worker ships its lines to the controller (``workeroutput``), which prints them.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which counts as a failure: {reason}"


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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for section, lines in SUMMARY.items():
        terminalreporter.section(section)
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests keep files worth looking at after a run (screenshots, reports)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
