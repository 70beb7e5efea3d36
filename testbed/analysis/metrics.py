"""Summary figures per replication: one long row per (source, replication, queue, metric).

All over the load window ``[load_start, load_end)`` of each replication (warm-up and drain
excluded), per queue and for the whole run (queue ``"*"``):

- ``throughput_msg_s``: ``acked`` deliveries with ``t_done`` in the window / window length;
- ``publish_rate_msg_s``: messages with ``t_publish`` in the window / window length (both
  from the per-window frame's ``acked_in_load``/``published_in_load`` counts, so the records
  are not read again);
- ``latency_count``: the size of the latency sample;
- ``latency_mean_s``, ``latency_p50_s``, ``latency_p95_s``, ``latency_p99_s``: over the
  load-window latency sample (:func:`testbed.analysis.latency.acked_in_load`), percentiles by
  ``percentile_approx`` at accuracy 10 000 (rank error ≤ 0.01 % of the sample);
- ``queue_depth_mean``: the exact time-average, over the load window, of the number of message
  copies in the queue — published and not yet settled — from the records (:func:`_depth`):
  every delivery that settles a copy (``acked``, ``dropped``, ``dead_lettered``) counts from the
  message's publish (``t_deliver - latency_s``) to its ``t_done``; a copy delivered but never
  settled (still queued at the end, or lost) counts from its publish until the window ends, and
  so does a message never delivered at all, in its ``messages.queue``; an ``unroutable`` row (a
  mandatory publish no queue took) was never in a queue and does not count. For the whole run,
  the sum over queues. The broker's own sampled depth (``depth_ready + depth_unacked``) stays in the
  windows and plots; it is not the judged figure because a 1 s snapshot of a queue whose depth
  turns over in milliseconds swings ±25 % per replication (RabbitMQ's management figures are
  also up to 5 s old), while the integral has no sampling error.

These definitions are those of ``emulator.sim.summary``, so the simulator's own summary and
this job agree on a predicted run.
"""

from __future__ import annotations

__all__ = ["METRICS", "replication_metrics", "per_type_from_queues"]

from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from testbed.analysis.phases import LoadWindows
from testbed.analysis.windows import OVERALL, by_queue_and_overall, latency_aggregates

KEYS = ["run_id", "source", "replication"]
METRICS = [
    "throughput_msg_s",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "queue_depth_mean",
    "publish_rate_msg_s",
    "latency_count",
]
LONG = [*KEYS, "queue", "metric", "value"]


def _long(wide: DataFrame, metrics: list[str]) -> DataFrame:
    values: list[str | Column] = list(metrics)
    ids: list[str | Column] = [*KEYS, "queue"]
    return wide.unpivot(ids, values, variableColumnName="metric", valueColumnName="value").select(
        *KEYS, "queue", "metric", F.col("value").cast("double").alias("value")
    )


def _rates(windows: DataFrame, load: LoadWindows) -> DataFrame:
    """Throughput and publish rate over the load span, from the windows' load counts."""
    span = load.end() - load.start()
    totals = (
        windows.groupBy(*KEYS, "queue")
        .agg(F.sum("acked_in_load").alias("acked"), F.sum("published_in_load").alias("sent"))
        .withColumn("span", span)
        .where(F.col("span") > 0)
        .select(
            *KEYS,
            "queue",
            (F.col("acked") / F.col("span")).alias("throughput_msg_s"),
            (F.col("sent") / F.col("span")).alias("publish_rate_msg_s"),
        )
    )
    return _long(totals, ["throughput_msg_s", "publish_rate_msg_s"])


SETTLED = ["acked", "dropped", "dead_lettered"]
"""Outcomes after which a copy is no longer in its queue (the others are redelivered)."""


def _depth(deliveries: DataFrame, messages: DataFrame, load: LoadWindows) -> DataFrame:
    """Time-average copies in each queue over the load window (see the module docstring)."""
    t_in = F.col("t_deliver") - F.col("latency_s")
    settles = F.col("outcome").isin(SETTLED)
    rows = deliveries.where(t_in.isNotNull() & (F.col("outcome") != "unroutable")).select(
        *KEYS, "queue", "msg_id", t_in.alias("t_in"),
        F.when(settles, F.coalesce("t_done", "t_deliver")).alias("t_out"),
    )  # fmt: skip
    unsettled = (
        rows.groupBy(*KEYS, "queue", "msg_id")
        .agg(F.min("t_in").alias("t_in"), F.count("t_out").alias("settles"))
        .where(F.col("settles") == 0)
        .select(*KEYS, "queue", "t_in", F.lit(None).cast("double").alias("t_out"))
    )
    never = (
        messages.where(F.col("t_publish").isNotNull())
        .join(deliveries.select(*KEYS, "msg_id").distinct(), [*KEYS, "msg_id"], "left_anti")
        .select(*KEYS, "queue", F.col("t_publish").alias("t_in"),
                F.lit(None).cast("double").alias("t_out"))
    )  # fmt: skip
    start, end = load.start(), load.end()
    inside = (
        rows.where(F.col("t_out").isNotNull())
        .select(*KEYS, "queue", "t_in", "t_out")
        .unionByName(unsettled)
        .unionByName(never)
        .withColumn(
            "area",
            F.greatest(
                F.lit(0.0),
                F.least(F.coalesce(F.col("t_out"), end), end) - F.greatest(F.col("t_in"), start),
            ),
        )
        .withColumn("span", end - start)
        .where(F.col("span") > 0)
    )
    per_queue = inside.groupBy(*KEYS, "queue").agg(
        (F.sum("area") / F.first("span")).alias("queue_depth_mean")
    )
    overall = (
        per_queue.groupBy(*KEYS)
        .agg(F.sum("queue_depth_mean").alias("queue_depth_mean"))
        .withColumn("queue", F.lit(OVERALL))
    )
    return _long(per_queue.unionByName(overall), ["queue_depth_mean"])


def replication_metrics(
    windows: DataFrame,
    records: tuple[DataFrame, DataFrame],
    acked_load: DataFrame,
    load: LoadWindows,
    *,
    single_queue: bool = False,
) -> DataFrame:
    """``run_id, source, replication, queue, metric, value`` (see the module docstring).

    `records` is the side's ``(deliveries, messages)``; `windows` is
    :func:`testbed.analysis.windows.window_metrics` (its load-window counts give
    the rates); `acked_load` is :func:`testbed.analysis.latency.acked_in_load`; `load` the
    run's :class:`testbed.analysis.phases.LoadWindows`; ``single_queue`` as in
    :func:`testbed.analysis.windows.by_queue_and_overall`.
    """
    latency = by_queue_and_overall(
        acked_load.select(*KEYS, "queue", "latency_s"),
        KEYS,
        *latency_aggregates(F.col("latency_s")),
        single_queue=single_queue,
    )
    parts = [
        _rates(windows, load),
        _long(
            latency.withColumn("latency_count", F.col("latency_count").cast("double")),
            ["latency_count", "latency_mean_s", "latency_p50_s", "latency_p95_s", "latency_p99_s"],
        ),
        _depth(*records, load),
    ]
    return reduce(DataFrame.unionByName, parts).where(F.col("value").isNotNull()).select(*LONG)


def per_type_from_queues(metrics: DataFrame, flows: DataFrame) -> DataFrame:
    """Per-type latency (the shape of :func:`testbed.analysis.latency.per_type_latency`) from
    the per-queue figures, when each queue carries one type and each type one queue.

    `flows` is :func:`testbed.analysis.latency.queue_flows` (queues with ``flows == 1``
    are used; any other queue is left out).
    """
    lookup = flows.where(F.col("flows") == 1).select("run_id", "source", "queue", "flow")
    figures: list[str | bool | float | int] = [
        "latency_count",
        "latency_mean_s",
        "latency_p50_s",
        "latency_p95_s",
        "latency_p99_s",
    ]
    rows = (
        metrics.where((F.col("queue") != OVERALL) & F.col("metric").isin(figures))
        .join(F.broadcast(lookup), on=["run_id", "source", "queue"], how="inner")
        .groupBy(*KEYS, "flow")
        .pivot("metric", figures)
        .agg(F.first("value"))
    )
    return rows.select(
        *KEYS,
        "flow",
        F.col("latency_count").cast("long").alias("latency_count"),
        *[F.col(str(f)) for f in figures[1:]],
    )
