"""The Spark session the analysis runs in: quiet, loopback-only, UTC, stoppable by PID.

``local[*]`` by default; any master URL (``spark://host:7077``, ``yarn``, ``k8s://...``) through
``master``. With a local master the driver binds 127.0.0.1 and the shuffle uses few partitions
(the frames here are small after the first aggregation). The driver logs errors only, on
stderr, through ``log4j2.xml`` beside this module; the console progress bar and the web UI are
off.

``spark_scope`` reuses a session that is already running in this process (a test fixture's,
a notebook's) and leaves it running; a session it creates it also stops, and with it the
driver JVM it launched.
"""

from __future__ import annotations

__all__ = ["spark_session", "spark_scope", "stop_spark", "DEFAULT_MASTER"]

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOG_CONFIG = Path(__file__).with_name("log4j2.xml")


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "mqbed-analysis",
    driver_memory: str | None = None,
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """A configured session (``getOrCreate``: settings apply when this call starts the JVM).

    ``driver_memory`` sizes the driver heap (in local mode the executors live in it too);
    default ``$MQBED_SPARK_DRIVER_MEMORY`` or ``3g`` (enough for 10 million delivery rows per
    side, see ``tests/bench/bench_correlate.py``).
    """
    master = master or DEFAULT_MASTER
    driver_memory = driver_memory or os.environ.get("MQBED_SPARK_DRIVER_MEMORY", "3g")
    local = master.startswith("local")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_opts = f"-Dlog4j.configurationFile={LOG_CONFIG.as_uri()}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
    )
    if local:
        builder = (
            builder.config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions or 4))
        )
    elif shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark(spark: SparkSession, timeout: float = 20.0) -> None:
    """Stop the session and end the driver JVM this Python process launched (by its PID)."""
    from pyspark import SparkContext

    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - the JVM may already be gone; we end it below anyway
        pass
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - the JVM may already be gone; we end it below anyway
        pass
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
    SparkContext._gateway = None
    SparkContext._jvm = None


@contextmanager
def spark_scope(master: str | None = None, **kwargs: object) -> Iterator[SparkSession]:
    """The running session if there is one (left running), else a new one stopped at exit.

    "Running" means a live SparkContext in this process, not PySpark's thread-local *active*
    session: that one can read as absent from a thread the JVM has not seen, and a scope
    that then stopped "its" session would stop someone else's.
    """
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        yield SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        return
    spark = spark_session(master, **kwargs)  # type: ignore[arg-type]
    try:
        yield spark
    finally:
        stop_spark(spark)
