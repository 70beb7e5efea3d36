"""Tiny hand-built record frames for transform tests.

`frame(spark, "deliveries", rows)` builds a stacked frame (``run_id, source`` + the record
schema) from dicts; missing columns are null, ``run_id`` defaults to ``"r"``, ``source`` to
``"measured"`` and ``replication`` to 0.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from testbed.analysis.readers import spark_schema


def tagged_schema(table: str) -> T.StructType:
    base = spark_schema(table)
    return T.StructType(
        [T.StructField("run_id", T.StringType()), T.StructField("source", T.StringType())]
        + list(base.fields)
    )


def frame(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> DataFrame:
    schema = tagged_schema(table)
    defaults = {"run_id": "r", "source": "measured", "replication": 0}
    data = [tuple({**defaults, **row}.get(f.name) for f in schema.fields) for row in rows]
    return spark.createDataFrame(data, schema)


def phase_events(load: float, drain: float, **tags: Any) -> list[dict[str, Any]]:
    """``phase`` events: warmup at 0, load, drain, end."""
    return [
        {"t": 0.0, "kind": "phase", "target": "run", "detail": '{"phase": "warmup"}', **tags},
        {"t": load, "kind": "phase", "target": "run", "detail": '{"phase": "load"}', **tags},
        {"t": drain, "kind": "phase", "target": "run", "detail": '{"phase": "drain"}', **tags},
        {"t": drain + 1, "kind": "phase", "target": "run", "detail": '{"phase": "end"}', **tags},
    ]
