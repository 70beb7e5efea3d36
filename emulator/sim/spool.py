"""On-disk pieces of a streamed replication (``emulator.sim.recorder``): bounded memory.

A replication's per-message records leave memory in chunks of messages while it runs:

- a *retired chunk* of the messages table (every column known at publish, plus the confirms
  seen so far) is one Arrow IPC file, read back only for a late lookup (``ChunkFiles``; an
  in-flight message whose chunk retired early) and once at the end, in order;
- *side records* are fixed-width numpy rows appended to raw files (``SideFile``): the
  ledger's deliveries per message chunk, the in-window latencies the quantiles are selected
  from (``emulator.sim.select``);
- the tables go to ``<table>.r<N>.parquet`` part files row group by row group
  (``PartWriter``), and ``merge_parts`` joins the replications' parts in order (into a
  temporary file, fsynced and renamed into place: an interrupted prediction never leaves a
  torn table).

Nothing here holds more than one chunk (or one read block) in memory at a time.
"""

from __future__ import annotations

__all__ = ["ChunkFiles", "SideFile", "PartWriter", "merge_parts", "LEDGER_ROW"]

from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from testbed.core.atomic import atomic_open
from testbed.core.records import SCHEMAS

LEDGER_ROW = np.dtype([("m", "<i8"), ("q", "<i4"), ("o", "<i1")])
"""One ledger side record: message number, queue ordinal, outcome code (acked, dead-lettered
or unroutable only)."""


class ChunkFiles:
    """Retired message chunks, one Arrow IPC file each, with a small cache of read-backs."""

    def __init__(self, directory: Path, cache: int = 8) -> None:
        self.dir = directory
        self.cache: OrderedDict[int, dict[str, list[float] | np.ndarray]] = OrderedDict()
        self.size = cache

    def path(self, k: int) -> Path:
        return self.dir / f"messages-{k:06d}.arrow"

    def write(self, k: int, batch: pa.RecordBatch) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        with pa.OSFile(str(self.path(k)), "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
            w.write_batch(batch)

    def read(self, k: int) -> pa.RecordBatch:
        with pa.OSFile(str(self.path(k)), "rb") as f:
            return pa.ipc.open_file(f).get_batch(0)

    def column(self, k: int, name: str) -> list[float] | np.ndarray:
        """Column ``name`` of retired chunk ``k`` (cached: late lookups come in runs)."""
        cols = self.cache.get(k)
        if cols is None:
            batch = self.read(k)
            arrays = {
                n: batch.column(n).to_numpy(zero_copy_only=False)
                for n in ("size", "flow", "producer", "t_publish")  # what `lookup` reads
            }
            cols = {**arrays, "size_list": arrays["size"].tolist()}
            self.cache[k] = cols
            if len(self.cache) > self.size:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(k)
        return cols[name]

    def remove(self, k: int) -> None:
        self.cache.pop(k, None)
        self.path(k).unlink(missing_ok=True)


class SideFile:
    """Fixed-width records appended to a raw file, read back in blocks."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.path = path
        self.dtype = dtype
        self.rows = 0

    def append(self, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:
            np.ascontiguousarray(rows, dtype=self.dtype).tofile(f)
        self.rows += len(rows)

    def blocks(self, rows: int = 1 << 20) -> Iterator[np.ndarray]:
        if not self.rows:
            return
        with open(self.path, "rb") as f:
            while True:
                block = np.fromfile(f, dtype=self.dtype, count=rows)
                if len(block) == 0:
                    return
                yield block

    def read_all(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0, dtype=self.dtype)
        return np.fromfile(self.path, dtype=self.dtype)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


class PartWriter:
    """One table of one replication, written row group by row group."""

    def __init__(self, path: Path, table: str) -> None:
        self.path = path
        self.schema = SCHEMAS[table]
        self.rows = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._w = pq.ParquetWriter(str(path), self.schema)

    def write(self, data: pa.Table) -> None:
        if data.num_rows:
            self._w.write_table(data)
            self.rows += data.num_rows

    def close(self) -> Path:
        self._w.close()
        return self.path


def merge_parts(parts: list[Path], out: Path, table: str) -> Path:
    """Concatenate part files (in the given order) into ``out``, one row group at a time."""
    schema = SCHEMAS[table]
    with atomic_open(out) as sink, pq.ParquetWriter(sink, schema) as w:  # fsynced, renamed
        for part in parts:
            f = pq.ParquetFile(part)
            for g in range(f.num_row_groups):
                w.write_table(f.read_row_group(g))
        if not parts:
            w.write_table(schema.empty_table())
    return out
