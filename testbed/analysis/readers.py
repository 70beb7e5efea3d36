"""The I/O edge of the analysis: a run directory in, Spark frames tagged with `source` and
`run_id` out (docs/architecture.md "Run directory").

Both sides (``measured/``, ``predicted/``) are read with the record schemas of
:mod:`testbed.core.records`; an interrupted run's ``<table>.parts/`` files are read too
(merge-on-read, like :func:`testbed.core.records.read_table`). A side that is absent, or a
prediction made with ``method: analytic`` (a ``summary.json`` without tables), contributes no
rows. Ledgers and JSON files are read here as well, so the transforms never touch a disk.
"""

from __future__ import annotations

__all__ = [
    "SIDES",
    "RunFrames",
    "spark_schema",
    "read_run",
    "read_side_table",
    "read_ledgers",
    "read_json",
    "column_values",
]

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from testbed.core.ledger import compute_ledger
from testbed.core.records import SCHEMAS, Ledger, read_table
from testbed.core.visibility import DELAY_SUFFIX
from testbed.exceptions import ConfigurationError

SIDES = ("measured", "predicted")

_TYPES: dict[pa.DataType, T.DataType] = {
    pa.string(): T.StringType(),
    pa.int64(): T.LongType(),
    pa.int32(): T.IntegerType(),
    pa.float64(): T.DoubleType(),
    pa.bool_(): T.BooleanType(),
}


def spark_schema(table: str) -> T.StructType:
    """The Spark schema of a record table (from the pyarrow schema in `records`)."""
    return T.StructType(
        [T.StructField(f.name, _TYPES[f.type], nullable=True) for f in SCHEMAS[table]]
    )


@dataclass(frozen=True)
class RunFrames:
    """Every record table of one run, both sides stacked, with `source` and `run_id` columns."""

    run_id: str
    run_dir: Path
    messages: DataFrame
    deliveries: DataFrame
    timeseries: DataFrame
    events: DataFrame
    sides: tuple[str, ...]
    """The sides that have record tables (``measured`` always, ``predicted`` when simulated)."""

    def side(self, source: str) -> RunFrames:
        """The same run restricted to one side (a filter the optimizer resolves at plan time,
        so aggregations over one side group on fewer, literal-free keys)."""
        only = F.col("source") == source
        return replace(
            self,
            messages=self.messages.where(only),
            deliveries=self.deliveries.where(only),
            timeseries=self.timeseries.where(only),
            events=self.events.where(only),
            sides=(source,) if source in self.sides else (),
        )


def _table_files(side_dir: Path, table: str) -> list[str]:
    files = []
    merged = side_dir / f"{table}.parquet"
    if merged.is_file():
        files.append(str(merged))
    parts = side_dir / f"{table}.parts"
    if parts.is_dir():
        files.extend(str(p) for p in sorted(parts.glob("*.parquet")))
    return files


def has_tables(side_dir: Path) -> bool:
    """Whether a side directory holds record tables (not just a summary)."""
    return bool(_table_files(side_dir, "deliveries") or _table_files(side_dir, "messages"))


def read_side_table(
    spark: SparkSession, side_dir: Path, table: str, *, source: str, run_id: str
) -> DataFrame:
    """One table of one side, tagged; empty (with the schema) when the side has no such file."""
    schema = spark_schema(table)
    files = _table_files(side_dir, table)
    frame = (
        spark.read.schema(schema).parquet(*files) if files else spark.createDataFrame([], schema)
    )
    return frame.select(F.lit(run_id).alias("run_id"), F.lit(source).alias("source"), *schema.names)


def read_run(spark: SparkSession, run_dir: Path) -> RunFrames:
    """Both sides of `run_dir` as stacked frames. Raises ConfigurationError without
    ``measured/``."""
    run_dir = Path(run_dir)
    if not (run_dir / "measured").is_dir():
        raise ConfigurationError(f"{run_dir} is not a run directory: it has no measured/")
    run_id = run_dir.name
    sides = tuple(s for s in SIDES if has_tables(run_dir / s))
    frames: dict[str, DataFrame] = {}
    for table in SCHEMAS:
        parts = [read_side_table(spark, run_dir / s, table, source=s, run_id=run_id) for s in sides]
        frame = (
            parts[0]
            if parts
            else read_side_table(
                spark, run_dir / "measured", table, source="measured", run_id=run_id
            )
        )
        for extra in parts[1:]:
            frame = frame.unionByName(extra)
        if table == "timeseries":
            # a failed attempt waiting out its visibility timeout is in neither the ready nor
            # the unacked count (SQS reports it apart, as not visible); on RabbitMQ it sits in
            # the internal `<queue>.vt-delay` queue, which the simulator and ActiveMQ (copy
            # held by the consumer) do not have: its samples stay on disk, out of the depths
            frame = frame.where(~F.col("queue").endswith(DELAY_SUFFIX))
        frames[table] = frame
    return RunFrames(run_id=run_id, run_dir=run_dir, sides=sides, **frames)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from `path`, or None when the file is absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_ledgers(side_dir: Path, replications: list[int]) -> list[Ledger]:
    """Per-replication ledgers of one side, in replication order.

    Both sides write ``ledger.r<N>.json`` (and a summed ``ledger.json``) with several
    replications and only ``ledger.json`` with one (`testbed.core.ledger.write_ledgers`).
    A missing file is recomputed from the tables.
    """
    side_dir = Path(side_dir)
    out: list[Ledger] = []
    for rep in replications:
        names = [f"ledger.r{rep}.json"]
        if len(replications) == 1:
            names.append("ledger.json")
        found = next((side_dir / n for n in names if (side_dir / n).is_file()), None)
        if found is not None:
            out.append(Ledger.read(found))
            continue
        out.append(_recompute_ledger(side_dir, rep))
    return out


def _recompute_ledger(side_dir: Path, rep: int) -> Ledger:
    import pyarrow.compute as pc

    messages = read_table(side_dir, "messages")
    deliveries = read_table(side_dir, "deliveries")
    return compute_ledger(
        messages.filter(pc.equal(messages.column("replication"), rep)),
        deliveries.filter(pc.equal(deliveries.column("replication"), rep)),
    )


def column_values(side_dir: Path, table: str, column: str) -> set[str] | None:
    """The distinct values of a string column, from the Parquet footers alone (no scan):
    known when every row group's statistics have ``min == max``, else None (unknown)."""
    import pyarrow.parquet as pq

    values: set[str] = set()
    for name in _table_files(Path(side_dir), table):
        try:
            meta = pq.ParquetFile(name).metadata
        except (OSError, pa.ArrowInvalid):
            return None
        index = meta.schema.names.index(column) if column in meta.schema.names else -1
        if index < 0:
            return None
        for i in range(meta.num_row_groups):
            stats = meta.row_group(i).column(index).statistics
            if meta.row_group(i).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max or stats.min != stats.max:
                return None
            if stats.null_count:
                return None
            values.add(str(stats.min))
    return values
