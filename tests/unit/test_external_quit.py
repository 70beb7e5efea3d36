"""`LocustLauncher.await_external_quit`: a run with external workers merges its records only
after each worker has written its last ones (its usage file, the last act of its quit)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from testbed.workload.launcher import LocustLauncher


def _launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LocustLauncher, Path]:
    measured = tmp_path / "measured"
    usage = measured / "processes"
    usage.mkdir(parents=True)
    (usage / "w1-111.json").write_text("{}")  # an earlier replication's worker 1
    launcher = LocustLauncher(
        tmp_path / "c.json", measured / "locust", users=2, run_time=1.0,
        external_workers=2, rendezvous=tmp_path / ".locust" / "current.json",
    )  # fmt: skip
    monkeypatch.setattr(launcher, "_spawn", lambda *_: None)
    launcher.start("r1")
    return launcher, usage


def test_waits_for_every_slot_of_this_replication(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher, usage = _launcher(tmp_path, monkeypatch)

    def quit_late() -> None:
        time.sleep(0.3)
        (usage / "w2-222.json").write_text("{}")
        time.sleep(0.3)
        (usage / "w1-333.json").write_text("{}")

    writer = threading.Thread(target=quit_late)
    t0 = time.monotonic()
    writer.start()
    missing = launcher.await_external_quit(time.monotonic() + 10)
    writer.join(timeout=5)
    assert missing == []
    assert 0.55 < time.monotonic() - t0 < 5  # the earlier replication's w1 did not count


def test_names_the_slots_that_never_quit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launcher, usage = _launcher(tmp_path, monkeypatch)
    (usage / "w2-222.json").write_text("{}")
    (usage / "w1-444.tmp").write_text("{}")  # half-written: not yet its usage file
    t0 = time.monotonic()
    assert launcher.await_external_quit(time.monotonic() + 0.4) == [1]
    assert time.monotonic() - t0 >= 0.4
    launcher.unfinished = [1]
    assert "external Locust workers [1] had not written" in launcher.unfinished_note()
    launcher.unfinished = []
    assert launcher.unfinished_note() == ""
