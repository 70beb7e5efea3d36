"""The session factory's settings, and a scope that never stops a session it did not start."""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from testbed.analysis.session import spark_scope


def test_session_is_quiet_utc_and_on_loopback(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.ui.showConsoleProgress") == "false"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert "log4j2.xml" in (conf.get("spark.driver.extraJavaOptions") or "")


def test_scope_reuses_the_running_session_even_from_another_thread(spark: SparkSession) -> None:
    seen: dict[str, object] = {}

    def work() -> None:  # a thread the JVM has not seen: no thread-local active session
        with spark_scope("local[1]") as s:
            seen["same"] = s.sparkContext is spark.sparkContext
            seen["rows"] = s.range(4).count()

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=120)
    assert seen == {"same": True, "rows": 4}
    assert spark.range(3).count() == 3  # still running after the scope closed
