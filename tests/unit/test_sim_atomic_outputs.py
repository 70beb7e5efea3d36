"""Issue 16 item 6 (the simulator's side): ``predicted/summary.json`` and the merged
``messages``/``deliveries`` tables are written to a temporary file, fsynced and renamed into
place (`testbed.core.atomic.atomic_open`); an interrupted merge leaves the previous file whole
and no temporary file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.predict import _write_json
from emulator.sim.spool import PartWriter, merge_parts
from testbed.core.records import SCHEMAS


def _part(path: Path, rows: int) -> Path:
    schema = SCHEMAS["events"]
    writer = PartWriter(path, "events")
    data: dict[str, list[object]] = {f.name: [None] * rows for f in schema}
    data.update(t=[float(i) for i in range(rows)], kind=["phase"] * rows)
    writer.write(pa.Table.from_pydict(data, schema=schema))
    return writer.close()


def test_summary_json_is_fsynced_then_renamed(tmp_path: Path, fsynced: list[str]) -> None:
    out = tmp_path / "summary.json"
    out.write_text('{"old": true}\n')
    _write_json(out, {"new": 1})
    assert json.loads(out.read_text()) == {"new": 1}
    tmp_name = f".summary.json.{os.getpid()}.tmp"
    assert fsynced == [str(tmp_path / tmp_name), str(tmp_path)]  # the file, then its directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_merged_table_is_fsynced_then_renamed(tmp_path: Path, fsynced: list[str]) -> None:
    parts = [_part(tmp_path / f"events.r{i}.parquet", 3 + i) for i in range(2)]
    out = merge_parts(parts, tmp_path / "events.parquet", "events")
    assert pq.read_table(out).column("t").to_pylist() == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0]
    assert fsynced == [str(tmp_path / f".events.parquet.{os.getpid()}.tmp"), str(tmp_path)]


def test_an_interrupted_merge_keeps_the_old_table_and_no_temporary(tmp_path: Path) -> None:
    good = _part(tmp_path / "events.r0.parquet", 4)
    torn = tmp_path / "events.r1.parquet"
    torn.write_bytes(b"PAR1 not a parquet file")
    out = tmp_path / "events.parquet"
    merge_parts([good], out, "events")
    before = out.read_bytes()
    with pytest.raises(pa.ArrowInvalid):
        merge_parts([good, torn], out, "events")  # fails after the first part was written
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "events.parquet",
        "events.r0.parquet",
        "events.r1.parquet",
    ]
