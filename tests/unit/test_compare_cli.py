"""`python -m testbed.compare`: help, and the input errors it reports before starting Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.compare.__main__ import main


def test_help_names_the_arguments_methods_and_exit_codes() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "testbed.compare", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for text in (
        "RUN_DIR",
        "--page-dir DIR",
        "--json",
        "--level",
        "baseline",
        "Bonferroni",
        "3 bad input",
    ):
        assert text in shown, text


def a_run(root: Path, name: str, *, measured: bool = True) -> Path:
    run = root / name
    (run / "measured").mkdir(parents=True)
    (run / "scenario.yaml").write_text("name: x\n")
    if measured:
        (run / "measured" / "deliveries.parquet").write_bytes(b"")
    return run


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("one run", "at least two run directories, got 1"),
        ("not a run", "is not a run directory: it has no scenario.yaml"),
        ("missing", "no such directory"),
        ("no measured data", "has no measured data"),
        ("twice", "is given twice"),
    ],
)
def test_input_errors_exit_3_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, message: str
) -> None:
    good = a_run(tmp_path, "good")
    other = {
        "one run": None,
        "not a run": tmp_path,
        "missing": tmp_path / "nope",
        "no measured data": a_run(tmp_path, "empty", measured=False),
        "twice": good,
    }[case]
    args = [str(good)] + ([] if other is None else [str(other)])
    assert main(args) == 3
    err = capsys.readouterr().err
    assert message in " ".join(err.split()), err
