"""Reading a run: the internal visibility-timeout delay queue stays out of the depths."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from testbed.analysis.readers import read_run
from testbed.core.records import write_table

ROW = {"t": [1.0, 1.0], "queue": ["work", "work.vt-delay"], "depth_ready": [3, 5],
       "depth_unacked": [1, 0], "publish_rate": [10.0, 0.0], "deliver_rate": [10.0, 0.0],
       "ack_rate": [9.0, 0.0], "consumers": [2, 0], "producers_blocked": [0, 0],
       "broker_up": [True, True], "memory_bytes": [0, 0], "replication": [0, 0]}  # fmt: skip


def test_vt_delay_queue_is_not_a_queue_of_the_run(spark: SparkSession, tmp_path: Path) -> None:
    write_table(tmp_path / "measured", "timeseries", ROW)
    frames = read_run(spark, tmp_path)
    rows = frames.timeseries.select("queue", "depth_ready").collect()
    assert [(r.queue, r.depth_ready) for r in rows] == [("work", 3)]
    assert Path(tmp_path / "measured" / "timeseries.parquet").is_file()  # data kept on disk
