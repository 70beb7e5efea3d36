"""Issue 16 item 6: a failing finalisation step (a full disk while merging the records) keeps
the run's own error and exit code, and environment.json is written first, whatever follows."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import testbed.run as run_mod
from testbed.core.scenario_loader import parse_scenario
from testbed.core.trace_file import TraceError, copy_trace
from testbed.exceptions import ScenarioError
from testbed.sweep import sweep

SCENARIO = """\
name: fin
duration: 5s
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: 10/s}]
consumers: [{name: c, queue: q, service_time: 1ms}]
"""


def _disk_full(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, "No space left on device")


def _live(tmp_path: Path, failing: BaseException | None) -> tuple[dict[str, Any], Path]:
    scenario, _ = parse_scenario(SCENARIO)
    run_dir = tmp_path / "run"
    (run_dir / "measured").mkdir(parents=True)

    @contextmanager
    def provisioned(*_: Any) -> Iterator[Any]:
        if failing is not None:
            raise failing
        yield SimpleNamespace(kind="rabbitmq", name="b", version="x", pid=None), None

    env: dict[str, Any] = {"interrupted": False}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_mod, "provisioned", provisioned)
        mp.setattr(run_mod, "collect_side", _disk_full)
        run_mod._live(
            scenario, tmp_path, tmp_path, 0, env, run_mod.RunResult(run_dir),
            SimpleNamespace(dir=tmp_path / "home"), Console(quiet=True),
            external_workers=0, workers=None, ui=False, predict=False, profile=None,
            calibration="shipped",
        )  # fmt: skip
    return env, run_dir


def test_disk_full_while_collecting_keeps_the_interrupt(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        _live(tmp_path, KeyboardInterrupt())
    written = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert written["interrupted"] is True and "ended" in written
    assert "No space left" in written["finalisation_errors"][0]


def test_disk_full_while_collecting_keeps_the_original_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError):  # exit code 3, not a traceback's 1
        _live(tmp_path, ScenarioError([]))
    assert (tmp_path / "run" / "environment.json").exists()


def test_disk_full_without_another_error_is_raised_after_every_step(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="No space left"):
        _live(tmp_path, None)
    written = json.loads((tmp_path / "run" / "environment.json").read_text())
    assert written["user_errors"] == [] and written["broker"]["name"] == "b"


def test_trace_is_copied_under_its_name_and_confined(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text("t\n0.5\n")
    copy = copy_trace("traces/t.csv", tmp_path, tmp_path / "run")
    assert copy == (tmp_path / "run" / "traces" / "t.csv").resolve()
    assert copy.read_text() == "t\n0.5\n"
    with pytest.raises(TraceError, match="absolute"):
        copy_trace("/etc/hostname", tmp_path, tmp_path / "run")


def test_sweep_reads_its_file_through_the_safe_loader(tmp_path: Path) -> None:
    """It read with yaml.safe_load(path.read_text()): a FIFO hung it, a directory or a huge
    file was a traceback. Now the scenario loader's reader refuses them with file and line."""
    (tmp_path / "dir.yaml").mkdir()
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    for path in (tmp_path / "dir.yaml", huge):
        with pytest.raises(ScenarioError) as caught:
            sweep(
                path, ["duration=1s:2s:1s"], home=tmp_path, out_dir=tmp_path / "out",
                console=Console(quiet=True),
            )  # fmt: skip
        assert f"{path}:1:" in str(caught.value)
