"""The suite's own rules (the plugin tests/ci_rules.py), each shown on a small project run by
pytest in a child process: no skip, xfail or xpass in any environment (no switch turns the rule
off: not CI, not --noconftest, not -p no:tests.ci_rules, not PYTEST_ADDOPTS under make), and a
full-suite run that collects fewer tests than tests/collected-minimum.txt fails."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULE = "no test may skip, xfail or xpass"
INI = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
PLUGIN = "tests.ci_rules"


def run_pytest(
    project: Path, *args: str, command: Sequence[str] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    """pytest on a small project in a child process (≤ 120 s), `env` on top of ours (without
    PYTEST_ADDOPTS unless `env` sets it). The project is the working directory and no path is
    given, as in a full-suite run. `command`: how to start pytest (``python -m pytest``)."""
    base = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run(
        [*(command or (sys.executable, "-m", "pytest")), "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=120,
        cwd=project,
    )


def make_project(
    path: Path, files: dict[str, str], minimum: int, ini: str = "", addopts: str = ""
) -> Path:
    """The suite's conftest, its rules plugin with a collected-minimum.txt in ``tests/``,
    `files`, and a pytest.ini: xfail_strict, pythonpath and addopts as in pyproject.toml (plus
    `addopts` and `ini`)."""
    (path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (path / "tests").mkdir()
    (path / "tests" / "__init__.py").write_text("")
    (path / "tests" / "ci_rules.py").write_text((ROOT / "tests" / "ci_rules.py").read_text())
    (path / "tests" / "collected-minimum.txt").write_text(f"{minimum}\n")
    (path / "pytest.ini").write_text(
        f"[pytest]\nxfail_strict = {str(INI['xfail_strict']).lower()}\n"
        f"pythonpath = {' '.join(INI['pythonpath'])}\naddopts = {INI['addopts']} {addopts}\n{ini}"
    )
    for name, text in files.items():
        (path / name).write_text(text)
    return path


OK = {"test_ok.py": "def test_ok():\n    pass\n\ndef test_two():\n    pass\n"}

# case: (test module body after `import pytest`, what the output must name)
BROKEN = {
    "marker skip": ("@pytest.mark.skip(reason='no broker here')\ndef test_x():\n    pass\n",
                    "skipped: no broker here"),
    "skipif": ("@pytest.mark.skipif(True, reason='no docker engine')\ndef test_x():\n    pass\n",
               "skipped: no docker engine"),
    "fixture skip": ("@pytest.fixture\ndef engine():\n    pytest.skip('engine absent')\n\n"
                     "def test_x(engine):\n    pass\n", "skipped: engine absent"),
    "imperative skip": ("def test_x():\n    pytest.skip('no service')\n", "skipped: no service"),
    "module importorskip": ("pytest.importorskip('mqbed_no_such_module')\n\n"
                            "def test_x():\n    pass\n",
                            "skipped: could not import 'mqbed_no_such_module'"),
    "allow_module_level skip": ("pytest.skip('not today', allow_module_level=True)\n\n"
                                "def test_x():\n    pass\n", "skipped: not today"),
    "imperative xfail": ("def test_x():\n    pytest.xfail('flaky one')\n", "xfailed: flaky one"),
    "xfail marker": ("@pytest.mark.xfail(reason='known bug')\ndef test_x():\n    assert False\n",
                     "xfailed: known bug"),
    "strict xpass": ("@pytest.mark.xfail(reason='bug fixed')\ndef test_x():\n    pass\n",
                     "[XPASS(strict)] bug fixed"),
    "non-strict xpass": ("@pytest.mark.xfail(reason='fixed', strict=False)\n"
                         "def test_x():\n    pass\n", "xpassed: fixed"),
}  # fmt: skip


COLLECTION = ("module importorskip", "allow_module_level skip")


@pytest.mark.parametrize("case", BROKEN)
def test_skip_and_xfail_fail_the_run(tmp_path: Path, case: str) -> None:
    body, named = BROKEN[case]
    # 2 tests in test_ok.py (a skipped module collects nothing, so the count check stays quiet)
    make_project(tmp_path, {**OK, "test_case.py": f"import pytest\n\n{body}"}, minimum=2)
    run = run_pytest(tmp_path)
    assert run.returncode != 0, run.stdout
    assert named in run.stdout, run.stdout
    if case != "strict xpass":  # pytest's own failure, thanks to xfail_strict
        assert RULE in run.stdout, run.stdout
    if case in COLLECTION:  # a collection error stops the session before any test runs
        assert "Interrupted: 1 error during collection" in run.stdout, run.stdout
    else:
        assert "2 passed" in run.stdout, run.stdout  # the rest of the project ran as usual


def test_skip_fails_whatever_ci_says(tmp_path: Path) -> None:
    make_project(tmp_path, {"test_x.py": "import pytest\n\ndef test_needs_service():\n"
                                         "    pytest.skip('no broker')\n"}, minimum=1)  # fmt: skip
    for ci in ("true", "false"):  # CI=true once was the only way to get this failure
        run = run_pytest(tmp_path, CI=ci)
        assert run.returncode == 1, (ci, run.stdout)
        assert "1 failed" in run.stdout and f"skipped: no broker at {tmp_path}" in run.stdout


def test_a_clean_project_passes(tmp_path: Path) -> None:
    make_project(tmp_path, OK, minimum=2)
    for args in ((), ("-n", "2")):
        run = run_pytest(tmp_path, *args)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "2 passed" in run.stdout and RULE not in run.stdout


def test_the_rules_hold_in_xdist_workers(tmp_path: Path) -> None:
    files = {
        **OK,
        "test_a.py": "import pytest\n\n"
        + BROKEN["marker skip"][0]
        + BROKEN["xfail marker"][0].replace("test_x", "test_y"),
        "test_m.py": "import pytest\n\n" + BROKEN["module importorskip"][0],
    }
    make_project(tmp_path, files, minimum=4)
    run = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup")
    assert run.returncode != 0, run.stdout
    for case in ("marker skip", "xfail marker", "module importorskip"):
        assert BROKEN[case][1] in run.stdout, run.stdout
    assert "2 passed" in run.stdout and "1 failed, 2 passed, 2 errors" in run.stdout


def test_the_last_guard_catches_a_report_turned_back_into_a_skip(tmp_path: Path) -> None:
    """A plugin registered later whose report hook wraps ours (a sub-directory conftest) turns
    the failure back into a skip: the session still fails and names the test."""
    make_project(tmp_path, OK, minimum=3)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "conftest.py").write_text(
        "import pytest\n\n"
        "@pytest.hookimpl(wrapper=True, tryfirst=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    report = yield\n"
        "    if report.when == 'setup' and report.failed:\n"
        "        report.outcome, report.longrepr = 'skipped', ('x', 1, 'Skipped: hidden')\n"
        "    return report\n"
    )
    (tmp_path / "sub" / "test_s.py").write_text("import pytest\n\n" + BROKEN["marker skip"][0])
    run = run_pytest(tmp_path)
    assert run.returncode == 1, run.stdout
    assert "1 skipped" in run.stdout and "sub/test_s.py::test_x (setup)" in run.stdout


@pytest.mark.parametrize(
    "how",
    [
        {"addopts": "--deselect test_ok.py::test_two"},
        {"addopts": '-k "not two"'},
        {"env": "-m 'not slow'", "mark": True},
        {"minimum": 3},
        {"minimum": 3, "args": ("-n", "2")},
        {"addopts": '-k "not two"', "args": ("-n", "2", "--dist", "loadgroup")},
    ],
    ids=["ini-deselect", "ini-k", "env-m", "lost-test", "lost-test-xdist", "ini-k-xdist"],
)
def test_a_full_run_that_collects_fewer_tests_fails(tmp_path: Path, how: dict) -> None:
    files = dict(OK)
    if how.get("mark"):
        files["test_ok.py"] = "import pytest\n\n" + files["test_ok.py"].replace(
            "def test_two", "@pytest.mark.slow\ndef test_two"
        )
    ini = how.get("ini", "") + "markers = slow: long\n"
    make_project(tmp_path, files, how.get("minimum", 2), ini=ini, addopts=how.get("addopts", ""))
    env = {"PYTEST_ADDOPTS": how["env"]} if "env" in how else {}
    run = run_pytest(tmp_path, *how.get("args", ()), **env)
    assert run.returncode == 1, run.stdout + run.stderr
    expected = f"collected {1 if 'minimum' not in how else 2} test(s) (after deselection), "
    expected += f"fewer than the {how.get('minimum', 2)} in tests/collected-minimum.txt"
    assert expected in run.stdout + run.stderr, run.stdout + run.stderr
    assert "passed" not in run.stdout  # it stops before running anything


@pytest.mark.parametrize(
    "args", [("-k", "not two"), ("test_ok.py::test_ok",), ("--deselect", "test_ok.py::test_two")]
)
def test_a_developer_may_still_pick_tests_on_the_command_line(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    make_project(tmp_path, OK, minimum=2)
    run = run_pytest(tmp_path, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_make_test_is_a_full_run_with_strict_xfail() -> None:
    """The rules above bind ``make test`` only if its command line picks nothing (a path, -k or
    -m there would exempt it), pytest starts without PYTEST_ADDOPTS, addopts loads the rules
    plugin, and the repository's minimum is readable."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    at = lines.index(next(x for x in lines if x.startswith("test:")))
    recipe = [lines[at + 1].split(), lines[at + 2].split()]
    report = [[w for w in r if w.startswith("--durations=")] for r in recipe]  # reporting only
    recipe = [[w for w in r if not w.startswith("--durations=")] for r in recipe]
    assert all(len(r) <= 1 for r in report), report
    assert recipe == [
        ["MQBED_GATE_PHASE=defer", "$(PYTEST)", "$(PYTEST_PARALLEL)"],
        ["MQBED_GATE_PHASE=only", "$(PYTEST)"],
    ], recipe
    unit = lines[lines.index(next(x for x in lines if x.startswith("unit:"))) + 1].split()
    assert unit == ["$(PYTEST)", "$(PYTEST_PARALLEL)", "tests/unit"], unit
    assert "PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup" in lines
    assert "PYTEST := env -u PYTEST_ADDOPTS $(BIN)/pytest" in lines
    steps = [x for x in lines if x.startswith("\t")]
    assert sum("$(PYTEST) " in x for x in steps) == 3, steps  # test (2) and unit
    assert not [x for x in steps if "bin)/pytest" in x or "-m pytest" in x], steps
    assert INI["xfail_strict"] is True and INI["testpaths"] == ["tests"]
    assert INI["pythonpath"] == ["."]
    opts = shlex.split(INI["addopts"])
    assert opts[opts.index("-p") + 1] == PLUGIN and not any("no:" in o for o in opts), opts
    total, gate = (int(x) for x in (ROOT / "tests" / "collected-minimum.txt").read_text().split())
    assert total >= 700 and gate >= 2  # the accuracy gate: RabbitMQ and ActiveMQ


SKIPPING = {"test_x.py": "import pytest\n\ndef test_x():\n    pytest.skip('no broker')\n"}


def test_noconftest_keeps_the_rules(tmp_path: Path) -> None:
    """The rules are a plugin: --noconftest (which once turned every rule off) leaves them."""
    make_project(tmp_path, SKIPPING, minimum=1)
    for env in ({"PYTEST_ADDOPTS": "--noconftest"}, {}):
        run = run_pytest(tmp_path, **env)
        assert run.returncode == 1, (env, run.stdout)
        assert "1 failed" in run.stdout and "skipped: no broker" in run.stdout, run.stdout
    run = run_pytest(tmp_path, "--noconftest")
    assert run.returncode == 1 and "skipped: no broker" in run.stdout, run.stdout


@pytest.mark.parametrize("where", ["PYTEST_ADDOPTS", "command line"])
def test_blocking_the_rules_plugin_is_refused(tmp_path: Path, where: str) -> None:
    """``-p no:tests.ci_rules`` unloads the rules; the conftest then refuses the session."""
    make_project(tmp_path, SKIPPING, minimum=1)
    block = ("-p", f"no:{PLUGIN}")
    if where == "PYTEST_ADDOPTS":
        run = run_pytest(tmp_path, PYTEST_ADDOPTS=" ".join(block))
    else:
        run = run_pytest(tmp_path, *block)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert f"the suite's rules ({PLUGIN}) are not loaded" in run.stderr, run.stderr
    assert "passed" not in run.stdout and "skipped" not in run.stdout, run.stdout


def test_make_runs_pytest_without_pytest_addopts(tmp_path: Path) -> None:
    """With both switches at once (no conftest, no plugin) nothing inside pytest is left to
    object, so ``make``'s pytest command (``$(PYTEST)``, run here exactly as make expands it)
    must not let the environment pass them: the skip still fails there, and passes as a skip
    through a bare pytest."""
    make_project(tmp_path, SKIPPING, minimum=1)
    bindir = Path(sys.executable).parent
    shown = subprocess.run(
        ["make", "-s", "--no-print-directory", "-C", str(ROOT), "--eval",
         "mqbed-show-pytest: ; @echo $(PYTEST)", "mqbed-show-pytest", f"BIN={bindir}"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    command = shlex.split(shown)
    assert command and command[-1] == f"{bindir}/pytest", shown
    off = {"PYTEST_ADDOPTS": f"--noconftest -p no:{PLUGIN}"}
    bare = run_pytest(tmp_path, command=command[-1:], **off)
    assert bare.returncode == 0 and "1 skipped" in bare.stdout, bare.stdout  # the hole make closes
    made = run_pytest(tmp_path, command=command, **off)
    assert made.returncode == 1, made.stdout + made.stderr
    assert "1 failed" in made.stdout and "skipped: no broker" in made.stdout, made.stdout


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """``make test`` runs tests/docker as one xdist group (one dockerd, one image build): the
    installed pytest and pytest-xdist must honour a group mark added at collection (pytest 9.2
    silently stopped that: pytest-xdist#1386)."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if 'grouped' in item.name:\n"
        "            item.add_marker(pytest.mark.xdist_group('docker'))\n"
    )
    (tmp_path / "test_g.py").write_text(
        "import os, time, pytest\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_grouped(i):\n"
        "    time.sleep(0.2)\n"
        "    with open(os.path.join(os.environ['OUT'], f'w{i}'), 'w') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'])\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_free(i):\n"
        "    time.sleep(0.2)\n"
    )
    out = tmp_path / "out"
    out.mkdir()
    run = run_pytest(tmp_path, "-n", "2", "--dist", "loadgroup", OUT=str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    workers = {(out / f"w{i}").read_text() for i in range(6)}
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"


GATED = {
    "test_g.py": "import pytest\n\n@pytest.mark.gate\ndef test_gate():\n    pass\n\n"
    "def test_plain():\n    pass\n\ndef test_plain2():\n    pass\n"
}


def test_make_test_phases_split_off_the_gate_and_each_checks_its_share(tmp_path: Path) -> None:
    """``make test`` runs everything but the ``gate`` tests in xdist workers, then the gate
    tests alone: each phase must collect its share of ``collected-minimum.txt`` ("all gate")."""
    proj = make_project(tmp_path, GATED, 0, ini="markers =\n    gate: live accuracy\n")
    (proj / "tests" / "collected-minimum.txt").write_text("3 1\n")
    defer = run_pytest(proj, MQBED_GATE_PHASE="defer")
    assert defer.returncode == 0 and "2 passed, 1 deselected" in defer.stdout, defer.stdout
    only = run_pytest(proj, MQBED_GATE_PHASE="only")
    assert only.returncode == 0 and "1 passed, 2 deselected" in only.stdout, only.stdout
    whole = run_pytest(proj, MQBED_GATE_PHASE="")
    assert whole.returncode == 0 and "3 passed" in whole.stdout, whole.stdout
    (proj / "tests" / "collected-minimum.txt").write_text("3 2\n")  # a gate test went missing
    lost = run_pytest(proj, MQBED_GATE_PHASE="only")
    assert lost.returncode != 0 and "fewer than the 2" in lost.stdout + lost.stderr
    shrunk = run_pytest(proj, MQBED_GATE_PHASE="defer")  # 2 plain tests, 3 - 2 = 1 needed: ok
    assert shrunk.returncode == 0, shrunk.stdout


FLOOR_SLACK = 20
"""Tests that may be added before the floor must follow (a floor far below the count lets as
many tests vanish unnoticed: it once sat 123 below, at 1168 against 1291)."""


def test_the_floor_follows_the_suite() -> None:
    """tests/collected-minimum.txt is at most FLOOR_SLACK below what the suite collects now,
    per ``make test`` phase (the gate's share exactly: it is two or three live tests)."""
    floor = [int(x) for x in (ROOT / "tests" / "collected-minimum.txt").read_text().split()]
    counts = []
    for phase in ("defer", "only"):
        run = run_pytest(ROOT, "--collect-only", MQBED_GATE_PHASE=phase)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr
        counts.append(int(run.stdout.strip().splitlines()[-1].split("/")[0]))
    assert 0 <= counts[0] - (floor[0] - floor[1]) <= FLOOR_SLACK, (counts, floor)
    assert counts[1] == floor[1], (counts, floor)
