"""The record schemas shared by live runs and predictions (docs/architecture.md "Run directory").

Both sides write exactly these tables, so the comparison is a join. Times are float seconds since
the workload start (t=0) of the run. Besides its own columns every table carries
`replication`, so measured and predicted replications can be joined one to one.

Writers buffer rows per worker and flush a Parquet *part* file every `batch_rows` rows, when
the oldest buffered row is `flush_interval` seconds old (and on `flush()`/`close()`), so a
crash loses at most the rows of the last `flush_interval` seconds (and never more than one
batch). `merge_parts` concatenates the parts into ``<table>.parquet`` at the end of a run.

The merge is crash-safe: the merged file names the parts it holds in its own metadata (its
*manifest*, written atomically with it), only those parts are deleted afterwards, and readers
skip parts the manifest names. A part that arrives during or after a merge (an external worker
still flushing) is kept and read; a crash between the merge and the deletions double-counts
nothing.
"""

from __future__ import annotations

__all__ = [
    "SCHEMAS",
    "MESSAGES",
    "DELIVERIES",
    "TIMESERIES",
    "EVENTS",
    "OUTCOMES",
    "Ledger",
    "RecordWriter",
    "merge_parts",
    "read_table",
    "write_table",
]

import json
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from testbed.core.atomic import atomic_write_parquet, atomic_write_text

MESSAGES = pa.schema(
    [
        ("msg_id", pa.string()),
        ("flow", pa.string()),
        ("queue", pa.string()),
        ("producer", pa.string()),
        ("size_bytes", pa.int64()),
        ("t_intended", pa.float64()),
        ("t_publish", pa.float64()),
        ("t_confirm", pa.float64()),
        ("replication", pa.int32()),
    ]
)
OUTCOMES = ("acked", "nacked", "timed_out", "dropped", "crashed", "dead_lettered", "unroutable")
"""``unroutable`` is not a delivery attempt but a message's fate, as ``dead_lettered`` is: the
broker found no queue for it (a transient subscription whose consumer was away) and returned
it to its ``mandatory`` producer; its ``consumer`` is empty."""
DELIVERIES = pa.schema(
    [
        ("msg_id", pa.string()),
        ("queue", pa.string()),
        ("consumer", pa.string()),
        ("attempt", pa.int32()),
        ("t_deliver", pa.float64()),
        ("t_done", pa.float64()),
        ("outcome", pa.string()),
        ("redelivered", pa.bool_()),
        ("latency_s", pa.float64()),
        ("service_s", pa.float64()),
        ("replication", pa.int32()),
    ]
)
"""``service_s``: the service time the live consumer drew for this delivery (its scenario's
``service_time``), so ``t_done - t_deliver - service_s`` is the client's own cost (timer
overshoot, ack); null where nothing was served (failures, crashes) and in predictions."""
TIMESERIES = pa.schema(
    [
        ("t", pa.float64()),
        ("queue", pa.string()),
        ("depth_ready", pa.int64()),
        ("depth_unacked", pa.int64()),
        ("publish_rate", pa.float64()),
        ("deliver_rate", pa.float64()),
        ("ack_rate", pa.float64()),
        ("consumers", pa.int32()),
        ("producers_blocked", pa.int32()),
        ("broker_up", pa.bool_()),
        ("memory_bytes", pa.int64()),
        ("replication", pa.int32()),
    ]
)
EVENTS = pa.schema(
    [
        ("t", pa.float64()),
        ("kind", pa.string()),
        ("target", pa.string()),
        ("detail", pa.string()),
        ("replication", pa.int32()),
    ]
)
SCHEMAS: dict[str, pa.Schema] = {
    "messages": MESSAGES,
    "deliveries": DELIVERIES,
    "timeseries": TIMESERIES,
    "events": EVENTS,
}


@dataclass
class Ledger:
    """Jepsen-style queue checker totals (docs/architecture.md "Run directory")."""

    sent: int = 0
    confirmed: int = 0
    delivered_unique: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    recovered: int = 0
    redeliveries: int = 0
    dead_lettered: int = 0
    unroutable: int = 0
    order_violations: int = 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in data.items() if k in names})

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> Ledger:
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))


_ARROW_READY = False


def _warm_arrow() -> None:
    """Pay pyarrow's one-off conversion set-up (~0.25 s on the first ``pa.array`` call) now.

    Without this the first batch flush of a load phase stalled the gevent hub for ~230 ms,
    delaying every scheduled publish behind it (bench_workload: p99 publish delay 137 ms).
    """
    global _ARROW_READY
    if not _ARROW_READY:
        pa.array([None], type=pa.float64())
        _ARROW_READY = True


class RecordWriter:
    """Buffered, crash-tolerant writer of one table for one worker.

    Rows are tuples in schema column order (the fast path for hot loops) or dicts. Each flush
    writes ``<dir>/<table>.parts/<worker>-<seq>.parquet`` atomically (write + rename). With a
    `flush_interval` (seconds), an append also flushes when the oldest buffered row is that old;
    a process with idle spells calls :meth:`flush_due` from a timer so the bound holds then too.
    """

    def __init__(
        self,
        directory: Path,
        table: str,
        worker: str = "",
        batch_rows: int = 5000,
        flush_interval: float | None = None,
    ):
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}; expected one of {sorted(SCHEMAS)}")
        self.schema = SCHEMAS[table]
        self.table = table
        self.parts_dir = Path(directory) / f"{table}.parts"
        self.parts_dir.mkdir(parents=True, exist_ok=True)
        self.worker = worker or f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.batch_rows = batch_rows
        self._names = self.schema.names
        self._rows: list[Sequence[Any]] = []
        self._seq = 0
        self.rows_written = 0
        self.flush_interval = flush_interval
        self._oldest = 0.0  # monotonic time of the oldest buffered row
        _warm_arrow()

    def append(self, row: Sequence[Any] | dict[str, Any]) -> None:
        if isinstance(row, dict):
            row = tuple(row.get(n) for n in self._names)
        if not self._rows:
            self._oldest = time.monotonic()
        self._rows.append(row)
        if len(self._rows) >= self.batch_rows:
            self.flush()
        elif self.flush_interval is not None:
            self.flush_due()

    def flush_due(self, now: float | None = None) -> bool:
        """Flush if the oldest buffered row is `flush_interval` old; True if it flushed."""
        if not self._rows or self.flush_interval is None:
            return False
        if (time.monotonic() if now is None else now) - self._oldest < self.flush_interval:
            return False
        self.flush()
        return True

    def extend(self, rows: Iterable[Sequence[Any]]) -> None:
        for r in rows:
            self.append(r)

    def flush(self) -> None:
        if not self._rows:
            return
        columns = list(zip(*self._rows, strict=True))
        arrays = [pa.array(col, type=self.schema.field(i).type) for i, col in enumerate(columns)]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        final = self.parts_dir / f"{self.worker}-{self._seq:06d}.parquet"
        tmp = final.with_suffix(".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        self._seq += 1
        self.rows_written += len(self._rows)
        self._rows = []

    @property
    def rows_appended(self) -> int:
        """Rows appended so far, written or still buffered."""
        return self.rows_written + len(self._rows)

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_table(directory: Path, table: str, data: pa.Table | dict[str, Sequence[Any]]) -> Path:
    """Write a whole table at once (the simulator's path), conformed to the schema, atomically.

    A column the data lacks is written as nulls (a writer older than the schema, e.g. a
    ``deliveries`` table without ``service_s``), as :func:`read_table` reads old files."""
    schema = SCHEMAS[table]
    if isinstance(data, dict):
        data = pa.Table.from_pydict(dict(data))
    for f in schema:
        if f.name not in data.column_names:
            data = data.append_column(f.name, pa.nulls(data.num_rows, f.type))
    data = data.select(schema.names).cast(schema)
    path = Path(directory) / f"{table}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(path, data)
    return path


MANIFEST_KEY = b"mqbed.merged_parts"
"""Metadata key of a merged table: the JSON list of the part files it holds."""


def _manifest(out: Path) -> set[str]:
    """Names of the parts merged into `out` (empty when there is no such file or list)."""
    if not out.exists():
        return set()
    meta = pq.read_schema(out).metadata or {}
    return set(json.loads(meta.get(MANIFEST_KEY, b"[]")))


def _read_parts(parts: list[Path], schema: pa.Schema) -> tuple[list[pa.Table], list[str]]:
    """The readable parts and their names; a part being written is a ``.tmp``, never listed."""
    tables, names = [], []
    for p in parts:
        try:
            tables.append(pq.read_table(p, schema=schema))
        except (OSError, pa.ArrowInvalid):
            continue  # unreadable: kept on disk, not named, not merged
        names.append(p.name)
    return tables, names


def merge_parts(directory: Path, table: str, sort_by: str | None = None) -> Path:
    """Concatenate ``<table>.parts/*.parquet`` (and an existing ``<table>.parquet``) into one.

    Merges the parts listed now and names them in the output's manifest; deletes only those,
    after the output is durably in place. Later or unreadable parts stay for the next merge or
    :func:`read_table`. Always produces a file, possibly empty, with the table's schema.
    """
    directory = Path(directory)
    schema = SCHEMAS[table]
    parts_dir = directory / f"{table}.parts"
    out = directory / f"{table}.parquet"
    done = _manifest(out)
    listed = sorted(parts_dir.glob("*.parquet")) if parts_dir.exists() else []
    tables = [pq.read_table(out, schema=schema)] if out.exists() else []
    new_tables, new_names = _read_parts([p for p in listed if p.name not in done], schema)
    tables += new_tables
    merged = pa.concat_tables(tables) if tables else schema.empty_table()
    if sort_by and merged.num_rows:
        merged = merged.sort_by(sort_by)
    present = {p.name for p in listed}
    manifest = sorted((done & present) | set(new_names))
    meta = {**(schema.metadata or {}), MANIFEST_KEY: json.dumps(manifest).encode()}
    atomic_write_parquet(out, merged.replace_schema_metadata(meta))
    for name in manifest:
        (parts_dir / name).unlink(missing_ok=True)
    if parts_dir.exists() and not any(parts_dir.iterdir()):
        parts_dir.rmdir()
    return out


def read_table(directory: Path, table: str) -> pa.Table:
    """Read a merged table, plus the parts it does not hold yet (an interrupted run's, or a
    late worker's): merge-on-read."""
    directory = Path(directory)
    schema = SCHEMAS[table]
    tables = []
    out = directory / f"{table}.parquet"
    if out.exists():
        tables.append(pq.read_table(out, schema=schema))
    parts_dir = directory / f"{table}.parts"
    if parts_dir.exists():
        done = _manifest(out)
        parts = [p for p in sorted(parts_dir.glob("*.parquet")) if p.name not in done]
        tables += _read_parts(parts, schema)[0]
    return pa.concat_tables(tables) if tables else schema.empty_table()
