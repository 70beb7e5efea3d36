"""The pytest plugin's Spark: `Testbed` borrows a session already running in the process
(a notebook's, this suite's) and leaves it running; it stops only one it started.

The assertions on a real ``summary.json`` are in test_job_report.py (which analyses a run
anyway: one more Spark analysis costs minutes on a loaded machine)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from testbed.pytest_plugin.session import Settings, Testbed


def test_a_running_spark_is_borrowed_not_stopped(spark: SparkSession, tmp_path: Path) -> None:
    testbed = Testbed(Settings(home=tmp_path))
    assert testbed.spark().sparkContext is spark.sparkContext
    assert testbed.close() == []
    assert spark.sparkContext._jsc is not None  # still running (stop() clears it)
