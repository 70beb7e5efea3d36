"""The suite's rules, a pytest plugin loaded by ``-p tests.ci_rules`` from ``addopts`` in
pyproject.toml (so every run has them, ``make test``, ``make unit`` and a plain ``pytest`` of one
file alike). A plugin rather than a conftest: ``--noconftest`` does not turn it off, and
tests/conftest.py refuses a session where it is missing (``-p no:tests.ci_rules``). ``make test``
runs pytest with ``PYTEST_ADDOPTS`` unset, so no environment can pass either option to it.

- No test may skip, xfail or xpass, in any environment: a missing broker, engine or module is a
  failure, and so is a known bug marked xfail. A skip or xfail report is turned into a failure
  naming its reason (``pytest_runtest_makereport``); a skipped collector (module-level
  ``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)``) becomes a collection
  error (``pytest_make_collect_report``). Both run where the test or collector runs, so they
  hold in pytest-xdist workers, whose reports the controller then prints as they are. A last
  guard counts what reaches ``pytest_runtest_logreport`` / ``pytest_collectreport`` and fails
  the session should a skip or xfail still get through (another plugin rewriting reports).
- Nothing is silently deselected: a full-suite run (from the root directory, with a command
  line free of paths, node ids, ``-k``, ``-m``, ``--deselect``, ``--ignore``, ``--lf`` and
  ``--sw``; ``make test`` is one) must collect, after deselection, at least the number of tests
  written in ``collected-minimum.txt`` next to this file, else it stops before running any.
  Options in ``addopts`` or ``PYTEST_ADDOPTS`` do not exempt a run, only the command line does,
  so a developer can still run one file. Under xdist the controller checks the ids a worker
  collected (``pytest_xdist_node_collection_finished``); workers do not check.
- The accuracy gate runs last: ``MQBED_GATE_PHASE`` selects ``make test``'s two phases.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

MINIMUM_FILE = Path(__file__).resolve().with_name("collected-minimum.txt")
RULE = "no test may skip, xfail or xpass (tests/ci_rules.py)"

# -- no skip, no xfail ------------------------------------------------------------------------


def _refusal(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """Why `report` breaks the rule (None: it does not)."""
    if hasattr(report, "wasxfail"):
        kind = "xfailed" if report.skipped else "xpassed"  # a strict xpass is failed already
        return f"{kind}: {report.wasxfail or 'no reason given'} - {RULE}"
    if report.skipped:
        longrepr = report.longrepr
        where, reason = "", str(longrepr)
        if isinstance(longrepr, tuple):  # (path, line, "Skipped: reason")
            where, reason = f" at {longrepr[0]}:{longrepr[1]}", longrepr[2]
        return f"skipped: {reason.removeprefix('Skipped: ')}{where} - {RULE}"
    return None


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    refusal = _refusal(report)
    if refusal is not None:
        report.outcome = "failed"
        report.longrepr = refusal
        if hasattr(report, "wasxfail"):
            del report.wasxfail


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, Any]:
    report = yield  # tryfirst: outermost wrapper, after pytest's own xfail handling
    _fail(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    report = yield
    _fail(report)
    return report


BROKEN: list[str] = []
"""Reports that got through as skipped/xfailed/xpassed (this process's)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _refusal(report) is not None:
        BROKEN.append(f"{report.nodeid} ({report.when})")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if _refusal(report) is not None:
        BROKEN.append(report.nodeid or "<session>")


# -- nothing deselected -----------------------------------------------------------------------

PARSER: list[pytest.Parser] = []
"""pytest's option parser, kept to read the bare command line (without addopts)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    PARSER.append(parser)


def _selects(config: pytest.Config) -> bool:
    """Whether the command line itself picks a subset of the suite (or pytest runs from a
    directory below the root, which collects that directory only)."""
    if config.invocation_params.dir != config.rootpath or not PARSER:
        return True  # no PARSER: this plugin was not loaded at start-up, so not a suite run
    ns: argparse.Namespace = PARSER[0].parse_known_args(list(config.invocation_params.args))
    picks = ("file_or_dir", "keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf")
    return any(getattr(ns, name, None) for name in picks) or bool(getattr(ns, "stepwise", None))


def _check_collected(config: pytest.Config, count: int) -> None:
    if _selects(config):
        return
    name = (
        MINIMUM_FILE.relative_to(config.rootpath)
        if MINIMUM_FILE.is_relative_to(config.rootpath)
        else MINIMUM_FILE
    )
    try:
        total, gate = _gate_share()
    except (OSError, ValueError, IndexError) as err:
        pytest.exit(f"{name}: cannot read the minimum test count ({err})", 1)
    minimum = {"defer": total - gate, "only": gate}.get(GATE_PHASE, total)
    if count < minimum:
        pytest.exit(
            f"a full-suite run collected {count} test(s) (after deselection), fewer than the "
            f"{minimum} in {name}: tests were deselected, ignored or lost. "
            f"If they were removed on purpose, lower the figure in that file.",
            1,
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput") or config.pluginmanager.has_plugin("dsession"):
        return  # an xdist worker (the controller checks) or the controller (it collects nothing)
    _check_collected(config, len(session.items))


CHECKED: list[int] = []


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: Sequence[str]) -> None:
    if not CHECKED:  # every worker collects the whole suite (xdist compares them)
        CHECKED.append(len(ids))
        _check_collected(node.config, len(ids))


# -- the accuracy gate runs last --------------------------------------------------------------


GATE_PHASE = os.environ.get("MQBED_GATE_PHASE", "")
"""``make test`` runs the suite in two phases: ``defer`` (everything but the tests marked
``gate``, in pytest-xdist workers) then ``only`` (the gate tests alone, one process). A live
accuracy comparison beside the other worker's live tests measures that load, not the model
(seen twice: predicted latency 2x the measured one). Unset: the whole suite, gate tests last."""


def _gate_share() -> tuple[int, int]:
    """(all tests, gate tests) from ``collected-minimum.txt`` ("707 2")."""
    numbers = [int(x) for x in MINIMUM_FILE.read_text().split()[:2]]
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the gate tests last; in a ``make test`` phase keep only that phase's share (the
    other share is reported as deselected, and the count check asks for each phase's share)."""
    items.sort(key=lambda item: item.get_closest_marker("gate") is not None)
    if GATE_PHASE not in ("defer", "only"):
        return
    want_gate = GATE_PHASE == "only"
    keep = [i for i in items if (i.get_closest_marker("gate") is not None) == want_gate]
    drop = [i for i in items if (i.get_closest_marker("gate") is not None) != want_gate]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_sessionfinish(session: pytest.Session) -> None:
    if BROKEN and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if BROKEN:
        terminalreporter.section(RULE)
        for line in BROKEN:
            terminalreporter.write_line(line)
