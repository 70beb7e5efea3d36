"""The `mqbed` command line without brokers: --version, help texts, exit codes, and --json on
every command a script calls (the heavy work replaced by fakes that also print to stdout, which
the JSON mode must keep off stdout)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import testbed
from testbed.calibration.machine import write_profile
from testbed.cli import app, exit_codes
from testbed.core.profile import RestartTime, default_profile
from testbed.exceptions import (
    AccuracyMiss,
    BackendError,
    ConfigurationError,
    ScenarioError,
    ThresholdMiss,
)

REPO = Path(testbed.__file__).resolve().parents[1]
SCENARIO = """\
name: cli
duration: 5s
topology: {queues: [{name: work}]}
producers: [{name: p, queue: work, arrival: 10/s}]
consumers: [{name: c, queue: work}]
thresholds: [lost == 0]
"""
COMMANDS = [
    "validate",
    "up",
    "down",
    "run",
    "report",
    "compare",
    "sweep",
    "predict",
    "calibrate",
    "bench",
]


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def one_document(result: Any) -> dict[str, Any]:
    """stdout holds exactly one JSON document (json.loads refuses anything around it)."""
    doc: dict[str, Any] = json.loads(result.stdout)
    assert doc["exit_code"] == result.exit_code and doc["ok"] is (result.exit_code == 0)
    return doc


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and re.fullmatch(r"mqbed \S+\n", result.stdout), result.stdout


def test_help_shows_choices_flags_and_exit_codes() -> None:
    top = invoke("--help").stdout
    for code, text in exit_codes.CODES:
        assert re.search(rf"^\s+{code}\s+{re.escape(text)}$", top, re.M), (code, top)
    for command in COMMANDS:
        text = invoke(command, "--help").stdout
        assert "<bool>" not in text and "<str>" not in text, (command, text)
    assert "--broker <rabbitmq|activemq|all>" in invoke("up", "--help").stdout
    sweep = invoke("sweep", "--help").stdout
    assert (
        "producers[0].arrival.rate=50/s:200/s:50/s" in sweep
        and "\N{NEGATIVE SQUARED LATIN CAPITAL LETTER B}" not in sweep
    )
    assert "--profile FILE" in sweep
    assert "2-second points" in invoke("calibrate", "--help").stdout
    assert "--workers, --processes N" in invoke("predict", "--help").stdout


def test_exit_codes_are_distinct_documented_and_carried_by_the_errors() -> None:
    codes = [c for c, _ in exit_codes.CODES]
    assert len(codes) == len(set(codes))
    assert set(codes) >= {0, 1, 2, 3, 4, 5, 6, 130, 143, 129}
    readme = (REPO / "README.md").read_text()
    for code, _ in exit_codes.CODES:
        assert re.search(rf"^\| {code} \|", readme, re.M), code
    from emulator.errors import PredictionError

    cases = [(ScenarioError([]), 3), (ConfigurationError("x"), 3), (PredictionError("x"), 3),
             (BackendError("x"), 4), (AccuracyMiss("x"), 5), (ThresholdMiss("x"), 6)]  # fmt: skip
    assert [exit_codes.code_for(e) for e, _ in cases] == [c for _, c in cases]


def test_usage_error_exits_2_and_scenario_error_3(tmp_path: Path) -> None:
    assert invoke("run").exit_code == 2
    assert invoke("run", "s.yaml", "--threshold", "p95 < 50").exit_code == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("10/s", "0/s"))
    result = invoke("run", str(bad), "--json", "--no-report")
    doc = one_document(result)
    assert result.exit_code == 3 and "bad.yaml:4: producers[0].arrival" in doc["error"]


def _fake_run(tmp_path: Path, lost: int) -> Any:
    def run_scenario(path: Path, **kw: Any) -> Any:
        print("noise from the run")  # must not reach stdout in JSON mode
        run_dir = tmp_path / "runs" / "r1"
        (run_dir / "measured").mkdir(parents=True)
        (run_dir / "measured" / "ledger.json").write_text(json.dumps({"sent": 50, "lost": lost}))
        assert kw["overrides"].rate == "20/s" and kw["overrides"].duration == "2s"
        assert kw["profile"] == tmp_path / "given-profile.yaml"  # run --profile FILE
        return SimpleNamespace(run_dir=run_dir, interrupted=False, ledgers=[])

    return run_scenario


def test_run_json_judges_thresholds_and_exits_6_on_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import testbed.run

    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    monkeypatch.setattr(testbed.run, "run_scenario", _fake_run(tmp_path, lost=3))
    args = ["run", str(f), "--json", "--no-report", "--rate", "20/s", "-t", "2s",
            "--profile", str(tmp_path / "given-profile.yaml")]  # fmt: skip
    result = invoke(*args, "--threshold", "sent >= 50", "--home", str(tmp_path / "h"))
    doc = one_document(result)
    assert result.exit_code == 6 and "noise from the run" in result.stderr
    assert [(t["threshold"], t["ok"]) for t in doc["thresholds"]] == [
        ("lost == 0", False),
        ("sent >= 50", True),
    ]
    assert doc["run_dir"].endswith("r1") and "1 threshold(s) missed: lost == 0" in doc["error"]
    # latency thresholds need the analysis: refused before anything runs
    refused = invoke(*args, "--threshold", "p95 < 1s")
    assert refused.exit_code == 2 and "drop --no-report" in refused.output


def test_report_sweep_bench_calibrate_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import testbed.accuracy
    import testbed.bench
    import testbed.calibrate
    import testbed.report.build
    import testbed.sweep

    run_dir = tmp_path / "r1"
    (run_dir / "measured").mkdir(parents=True)

    def build_report(dirs: list[Path], **kw: Any) -> list[Path]:
        print("spark noise")
        (run_dir / "analysis").mkdir()
        (run_dir / "analysis" / "summary.json").write_text('{"verdict": {"status": "pass"}}')
        return [d / "report.html" for d in dirs]

    monkeypatch.setattr(testbed.report.build, "build_report", build_report)
    doc = one_document(invoke("report", str(run_dir), "--json"))
    assert doc["runs"][0]["prediction_accuracy"] == {"status": "pass"}

    monkeypatch.setattr(testbed.sweep, "sweep", lambda *a, **kw: print("x") or tmp_path / "sw")
    doc = one_document(invoke("sweep", "s.yaml", "--set", "seed=1,2", "--json"))
    assert doc["sweep_json"] == str(tmp_path / "sw" / "sweep.json")

    perf_doc = {"failed": [], "areas": []}
    monkeypatch.setattr(testbed.bench, "run_benchmarks", lambda t, **kw: print("x") or perf_doc)
    monkeypatch.setattr(testbed.accuracy, "run_accuracy", lambda t, **kw: t)
    monkeypatch.setattr(testbed.accuracy, "accuracy_misses", lambda p: ["quickstart: p95"])
    perf = one_document(invoke("bench", "--report", str(tmp_path / "p.md"), "--json"))
    assert perf["written"] == [str(tmp_path / "p.md")] and perf["performance"] == perf_doc
    result = invoke("bench", "--suite", "accuracy", "--report", str(tmp_path / "a.md"), "--json")
    assert result.exit_code == 5 and one_document(result)["misses"] == ["quickstart: p95"]

    fit = [SimpleNamespace(point="publish", n=100, ks=0.04)]
    restart = RestartTime(mean=7.5, sd=0.5, samples=2)
    prof = default_profile("rabbitmq").model_copy(update={"restart_time": restart})
    write_profile(prof, tmp_path / "p.yaml")
    monkeypatch.setattr(testbed.calibrate, "calibrate_machine",
                        lambda *a, **kw: (tmp_path / "p.yaml", SimpleNamespace(
                            fit=fit, provenance=SimpleNamespace(pooled=[]))))  # fmt: skip
    quick = ["calibrate", "--broker", "rabbitmq", "--quick", "--json"]
    doc = one_document(invoke(*quick, "--profile-out", str(tmp_path / "q.yaml")))
    assert doc["profile"] == str(tmp_path / "p.yaml") and doc["fit"][0]["ks"] == 0.04
    assert doc["draws"] == 1  # one draw, nothing pooled
    assert doc["restart_time"]["mean"] == 7.5 and doc["restart_time"]["samples"] == 2


def test_down_json_in_a_real_process_keeps_child_output_off_stdout(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    down = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "down", "--json", "--home", str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout) == {
        "home": str(tmp_path), "stopped": [], "ok": True, "exit_code": 0
    }  # fmt: skip
    # a child process started in JSON mode writes to stderr, not into the document
    script = (
        "import os\nfrom testbed.cli.output import json_output\n"
        "with json_output(True) as doc:\n    os.system('echo child')\n    doc['x'] = 1\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=60, env=env)  # fmt: skip
    assert json.loads(child.stdout) == {"x": 1, "ok": True, "exit_code": 0}
    assert child.stderr.strip() == "child"


def test_compare_is_wired_and_refuses_a_directory_that_is_no_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    result = invoke("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    doc = one_document(result)
    assert result.exit_code == exit_codes.SCENARIO and "is not a run directory" in doc["error"]
    assert "baseline" in invoke("compare", "--help").output


def test_out_says_what_it_names_in_every_command() -> None:
    """`--out DIR` is the parent directory of a new result wherever it is (run, sweep, bench);
    outputs of another kind have their own option, whose help says what it names; the old
    spellings are hidden from --help."""
    expect = {
        "run": [("--out DIR", "parent directory")],
        "sweep": [("--out DIR", "parent directory")],
        "bench": [("--out DIR", "parent directory"), ("--report FILE", "report file")],
        "predict": [("--run-dir DIR", "run directory itself")],
        "calibrate": [("--profile-out FILE", "profile YAML file")],
        "compare": [("--page-dir DIR", "directory compare.html")],
    }
    for command, options in expect.items():
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
        text = " ".join(result.output.split())
        assert result.exit_code == 0, command
        for option, kind in options:
            shown = text[text.find(option) :][:200]
            assert f"{option} Output: the {kind}" in text, (command, shown)
        if all(option != "--out DIR" for option, _ in options):
            assert "--out " not in text, (command, "an old spelling is shown")
        assert "--runs" not in text and "Deprecated" not in text, command


def test_old_spellings_still_work_and_name_their_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripts written before the renaming keep working: each old spelling reaches the same
    parameter and prints one line on stderr naming the option that replaces it."""
    import testbed.accuracy
    import testbed.bench
    import testbed.compare

    _calibration_without_broker(monkeypatch)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(testbed.compare, "compare_runs", lambda runs, out, *a, **kw: seen.update(
        compare=out) or {})  # fmt: skip
    monkeypatch.setattr(testbed.bench, "run_benchmarks", lambda t, **kw: {"failed": []})
    monkeypatch.setattr(testbed.accuracy, "accuracy_misses", lambda p: [])

    def run_accuracy(target: Path, **kw: Any) -> Path:
        seen.update(report=target, runs=kw["runs_dir"])
        return target

    monkeypatch.setattr(testbed.accuracy, "run_accuracy", run_accuracy)
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    home = ["--home", str(tmp_path / "h")]
    cases = [
        (["predict", str(f), "--out", str(tmp_path / "p")], "predict: --out", "--run-dir"),
        (["calibrate", "--broker", "rabbitmq", "--client-path-only", *home,
          "--out", str(tmp_path / "c.yaml")], "calibrate: --out", "--profile-out"),
        (["compare", "a", "b", "--out", str(tmp_path / "cmp")], "compare: --out", "--page-dir"),
        (["bench", "--suite", "accuracy", "--runs", str(tmp_path / "r"), "--out",
          str(tmp_path / "a.md")], "bench: --runs", "--out"),
    ]  # fmt: skip
    for args, was, now in cases:
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.output)
        lines = [x for x in result.stderr.splitlines() if "deprecated" in x]
        assert f"mqbed {was} is deprecated, use {now}" in lines, (args, result.stderr)
    assert "bench: --out FILE.md is deprecated, use --report" in result.stderr
    assert (tmp_path / "p" / "predicted" / "summary.json").is_file()
    assert (tmp_path / "c.yaml").is_file()
    assert seen == {
        "compare": tmp_path / "cmp",
        "report": tmp_path / "a.md",
        "runs": tmp_path / "r",
    }
    both = invoke("predict", str(f), "--out", "x", "--run-dir", "y")
    assert both.exit_code == 2 and "give --run-dir only" in both.output
    # the new spellings: bench --out DIR is the runs' parent, --report the report file
    new = invoke("bench", "--suite", "accuracy", "--out", str(tmp_path / "n"), "--report", "b.md")
    assert new.exit_code == 0 and "deprecated" not in new.stderr, new.output
    assert seen["runs"] == tmp_path / "n" and seen["report"] == Path("b.md")
    assert invoke("bench", "--out", str(tmp_path / "n")).exit_code == 2  # performance: no runs


def test_calibration_module_has_help_and_never_defaults_to_a_shipped_profile() -> None:
    """`python -m testbed.calibration` documents every option and writes only where told."""
    run = [sys.executable, "-m", "testbed.calibration"]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0
    for option in ("--broker", "--out FILE", "--duration SECONDS", "--repeats N", "--quick"):
        assert option in shown.stdout, option
    assert "Exit codes" in shown.stdout
    missing = subprocess.run([*run, "--broker", "rabbitmq"], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert missing.returncode == 2 and "--out" in missing.stderr


def test_library_warnings_stay_off_the_terminal(capfd: Any, monkeypatch: Any) -> None:
    """stomp.py's reconnect warnings (a killed ActiveMQ) do not reach stderr through logging's
    last-resort handler once a command ran; a warning of our own still would."""
    assert invoke("validate", str(REPO / "workloads/scenarios/quickstart.yaml")).exit_code == 0
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in `mqbed`: no logging set up
    capfd.readouterr()
    logging.getLogger("stomp.py").warning("could not connect to host 127.0.0.1, port 1")
    logging.getLogger("testbed.probe").warning("our own warning")
    stderr = capfd.readouterr().err
    assert "could not connect" not in stderr and "our own warning" in stderr


def _calibration_without_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mqbed calibrate`'s own code with the broker and the measurement replaced: a broker that
    `mqbed up` started (not ours, so no restart is measured) and the shipped client path."""
    import contextlib

    import testbed.calibrate
    from testbed.core.profile import load_profile

    shipped = load_profile(REPO / "deploy" / "calibration" / "rabbitmq-local.yaml").client_path

    @contextlib.contextmanager
    def provisioned(scenario: Any, home: Path, run_id: str) -> Any:
        yield SimpleNamespace(version="3.10.8", pid=None, name="rabbit"), None

    monkeypatch.setattr(testbed.calibrate, "provisioned", provisioned)
    monkeypatch.setattr(testbed.calibrate, "measure_client_path", lambda *a, **kw: shipped)


def test_calibrate_writes_the_machine_cache_by_default_and_refuses_a_quick_one_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an output file the profile goes to this machine's cache (the file `run
    --calibration auto|cached` predicts with), never under deploy/calibration/; a --quick
    smoke profile without one is a usage error, and nothing is written."""
    from testbed.calibration.machine import cache_path

    _calibration_without_broker(monkeypatch)
    shipped = {p: p.read_bytes() for p in (REPO / "deploy" / "calibration").rglob("*.yaml")}
    home = tmp_path / "home"
    quick = invoke("calibrate", "--broker", "rabbitmq", "--quick", "--home", str(home))
    assert quick.exit_code == 2 and "quick calibration is a smoke test" in quick.output
    assert not home.exists() or list(home.rglob("*.yaml")) == []
    result = invoke("calibrate", "--broker", "rabbitmq", "--client-path-only", "--json",
                    "--home", str(home))  # fmt: skip
    target = Path(one_document(result)["profile"])
    assert result.exit_code == 0 and target == cache_path(home, "rabbitmq", "3.10.8", "pika")
    assert target.is_file() and (REPO / "deploy") not in target.parents
    assert {p: p.read_bytes() for p in (REPO / "deploy" / "calibration").rglob("*.yaml")} == shipped


def test_readme_command_block_shows_every_command_and_its_json() -> None:
    """The README's "Command line" block has a line for every command of the app, and the
    `--json` paragraph names every command that takes --json."""
    import typer.main

    readme = (REPO / "README.md").read_text()
    block = readme.split("## Command line\n\n```\n", 1)[1].split("```", 1)[0]
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert set(commands) == set(COMMANDS)
    missing = [name for name in commands if not re.search(rf"^mqbed {name}\b", block, re.M)]
    assert missing == [], f"not in the README's command block: {missing}"
    listed = " ".join(readme.split("Every command takes `--json`", 1)[1].split(":", 1)[0].split())
    json_commands = [n for n, c in commands.items() if any("--json" in p.opts for p in c.params)]
    assert [n for n in json_commands if f"`{n}`" not in listed] == [], listed
