"""Issue 16 item 6 (the live side): a run's ``environment.json``, ``measured/ledger.json`` and
merged record tables (`testbed.observe.ledger.collect_side`) are written to a temporary file,
fsynced, renamed over the old one and the directory fsynced (`testbed.core.atomic`). A write
that fails or is killed before the rename leaves the previous file whole and nothing partial
under the final name; a part flushed while the merge runs is kept, not deleted."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import testbed.core.atomic as atomic
import testbed.core.records as records
from testbed.core.records import Ledger, RecordWriter, read_table
from testbed.observe.ledger import SORT_KEYS, collect_side


def _tmp(path: Path) -> str:
    return str(path.with_name(f".{path.name}.{os.getpid()}.tmp"))


def _messages(side: Path, worker: str, ids: range) -> None:
    with RecordWriter(side, "messages", worker=worker, batch_rows=2) as w:
        w.extend((f"m{i}", "f", "q", "p", 10, float(i), float(i), float(i), 0) for i in ids)


def _failing_replace(name: str) -> Any:
    """`os.replace` that fails (EIO) when renaming onto a file called `name`."""
    real = os.replace

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == name:
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst, *args, **kwargs)

    return replace


def test_collect_side_fsyncs_every_table_and_the_ledger_then_renames(
    tmp_path: Path, fsynced: list[str]
) -> None:
    _messages(tmp_path, "w1", range(3))
    (led,) = collect_side(tmp_path, 1)
    assert led.sent == 3 and Ledger.read(tmp_path / "ledger.json") == led
    expected = []
    for name in [*(f"{t}.parquet" for t in SORT_KEYS), "ledger.json"]:
        expected += [_tmp(tmp_path / name), str(tmp_path)]  # the file, then its directory
    assert fsynced == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(f"{t}.parquet" for t in SORT_KEYS), "ledger.json"]
    )


def test_environment_json_is_fsynced_then_renamed(tmp_path: Path, fsynced: list[str]) -> None:
    import testbed.run as run_mod

    run_mod._write_env(tmp_path, {"new": 1})
    assert json.loads((tmp_path / "environment.json").read_text()) == {"new": 1}
    assert fsynced == [_tmp(tmp_path / "environment.json"), str(tmp_path)]


@pytest.mark.parametrize("name", ["ledger.json", "messages.parquet"])
def test_a_failed_rename_keeps_the_previous_ledger_and_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    _messages(tmp_path, "w1", range(2))
    collect_side(tmp_path, 1)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    _messages(tmp_path, "w2", range(2, 5))
    with monkeypatch.context() as mp:
        mp.setattr(atomic.os, "replace", _failing_replace(name))
        with pytest.raises(OSError, match="Input/output error"):
            collect_side(tmp_path, 1)
    assert (tmp_path / name).read_bytes() == before[name]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    if name == "messages.parquet":  # the merge did not land: its parts are all still there
        assert len(list((tmp_path / "messages.parts").glob("w2-*.parquet"))) == 2
    assert read_table(tmp_path, "messages").num_rows == 5  # nothing lost, nothing twice
    assert collect_side(tmp_path, 1)[0].sent == 5  # and the next merge completes


KILLED = """\
import os, signal, sys
from pathlib import Path
import testbed.core.atomic as atomic
from testbed.observe.ledger import collect_side

real = os.replace
def replace(src, dst, *args, **kwargs):
    if Path(dst).name == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)  # written and fsynced, not yet renamed
    real(src, dst, *args, **kwargs)
atomic.os.replace = replace
collect_side(Path(sys.argv[1]), 1)
"""


@pytest.mark.parametrize("name", ["messages.parquet", "ledger.json"])
def test_a_process_killed_before_the_rename_leaves_the_previous_file_whole(
    tmp_path: Path, name: str
) -> None:
    _messages(tmp_path, "w1", range(2))
    collect_side(tmp_path, 1)
    before = (tmp_path / name).read_bytes()
    _messages(tmp_path, "w2", range(2, 5))
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED), str(tmp_path), name],
        capture_output=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr.decode()
    assert (tmp_path / name).read_bytes() == before  # the old file, not a torn new one
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].startswith(f".{name}.")  # hidden, never read
    assert read_table(tmp_path, "messages").num_rows == 5
    assert collect_side(tmp_path, 1)[0].sent == 5


def test_a_part_flushed_while_the_merge_runs_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part that lands after the merge listed the parts, even after the merged file is in
    place but before the merged parts are deleted, is not in the manifest: it stays on disk
    and is read (a delete-everything merge lost it)."""
    _messages(tmp_path, "w1", range(4))
    real = records.atomic_write_parquet

    def write_then_a_late_flush(path: Path, table: Any, **options: Any) -> None:
        real(path, table, **options)
        if path.name == "messages.parquet":
            _messages(tmp_path, "late", range(10, 11))  # an external worker's last flush

    monkeypatch.setattr(records, "atomic_write_parquet", write_then_a_late_flush)
    (led,) = collect_side(tmp_path, 1)
    assert pq.read_table(tmp_path / "messages.parquet").num_rows == 4
    assert led.sent == 5  # the ledger reads the merged table and the late part
    parts = sorted(p.name for p in (tmp_path / "messages.parts").iterdir())
    assert parts == ["late-000000.parquet"]
    assert read_table(tmp_path, "messages").column("msg_id").to_pylist()[-1] == "m10"
    monkeypatch.setattr(records, "atomic_write_parquet", real)
    assert collect_side(tmp_path, 1)[0].sent == 5
    assert not (tmp_path / "messages.parts").exists()
