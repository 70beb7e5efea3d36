"""One local Spark session for the whole test session (local[2], quiet, loopback only).

`build_report`/`spark_scope` find this session active and reuse it instead of starting
another JVM; it is stopped (JVM included) when the session ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from testbed.analysis.session import spark_session, stop_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", app_name="mqbed-tests", driver_memory="1g")
    try:
        yield session
    finally:
        stop_spark(session)
