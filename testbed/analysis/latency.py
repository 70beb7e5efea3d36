"""Latency distributions: the load-window sample, log-bucket histograms, CDFs, KS distance,
and the per-message-type table.

The sample is the ``acked`` deliveries of messages published in the load window (publish time
``t_deliver − latency_s``), per (source, replication, queue) — the same population as the
summary's latency figures.

Histograms use logarithmic buckets, ``BUCKETS_PER_DECADE = 200`` per factor of ten: bucket
``b`` holds latencies in ``[10^(b/200), 10^((b+1)/200))`` seconds, ~1.16 % wide; latencies
below ``MIN_LATENCY_S = 1 µs`` (including negative ones from clock skew) go to the lowest
bucket. The CDFs are exact at bucket edges, so the KS distance
``sup |F_measured − F_predicted|`` is taken over the edges: it can miss at most the mass
inside one bucket, and it costs one small aggregation instead of a global sort of both samples.
"""

from __future__ import annotations

__all__ = [
    "BUCKETS_PER_DECADE",
    "MIN_LATENCY_S",
    "acked_in_load",
    "bucket_of",
    "bucket_upper_s",
    "latency_histogram",
    "latency_cdf",
    "ks_distance",
    "per_type_latency",
    "queue_flows",
    "TYPE_FIGURES",
]

import math

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from testbed.analysis.phases import LoadWindows
from testbed.analysis.windows import (
    counts_by_queue_and_overall,
    latency_aggregates,
    window_index,
)

BUCKETS_PER_DECADE = 200
MIN_LATENCY_S = 1e-6
KEYS = ["run_id", "source", "replication"]
TYPE_FIGURES = [
    "latency_count",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
]


def bucket_of(latency: Column) -> Column:
    """The log bucket of `latency` (seconds)."""
    clamped = F.greatest(latency, F.lit(MIN_LATENCY_S))
    return F.floor(F.log10(clamped) * F.lit(BUCKETS_PER_DECADE)).cast("int")


def bucket_upper_s(bucket: int) -> float:
    """Upper edge (seconds) of bucket `bucket` (plain Python, for plots and tests)."""
    return math.pow(10.0, (bucket + 1) / BUCKETS_PER_DECADE)


def acked_in_load(deliveries: DataFrame, load: LoadWindows) -> DataFrame:
    """``KEYS, queue, msg_id, t_publish, latency_s`` of acked deliveries published in load."""
    t_publish = F.col("t_deliver") - F.col("latency_s")
    return deliveries.where(
        (F.col("outcome") == "acked") & F.col("latency_s").isNotNull() & load.contains(t_publish)
    ).select(*KEYS, "queue", "msg_id", t_publish.alias("t_publish"), "latency_s")


def latency_histogram(acked: DataFrame, window_s: float) -> DataFrame:
    """``KEYS, queue, window, bucket, n`` (n = deliveries); queue ``"*"`` pools every queue."""
    rows = acked.select(
        *KEYS,
        "queue",
        window_index(F.col("t_publish"), window_s).alias("window"),
        bucket_of(F.col("latency_s")).alias("bucket"),
    )
    return counts_by_queue_and_overall(rows, [*KEYS, "window", "bucket"], {"n": F.lit(1)}).select(
        *KEYS, "queue", "window", "bucket", "n"
    )


def latency_cdf(histogram: DataFrame) -> DataFrame:
    """Both sides' CDFs at the bucket edges, replications pooled.

    ``run_id, queue, bucket, upper_s, measured_n, predicted_n, measured_cdf, predicted_cdf``
    (a side without data has n = 0 and a null CDF).
    """
    counts = histogram.groupBy("run_id", "queue", "bucket").agg(
        F.sum(F.when(F.col("source") == "measured", F.col("n")).otherwise(0)).alias("m"),
        F.sum(F.when(F.col("source") == "predicted", F.col("n")).otherwise(0)).alias("p"),
    )
    upto = (
        Window.partitionBy("run_id", "queue")
        .orderBy("bucket")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    whole = Window.partitionBy("run_id", "queue")
    m_n, p_n = F.sum("m").over(whole), F.sum("p").over(whole)
    return counts.select(
        "run_id",
        "queue",
        "bucket",
        F.pow(F.lit(10.0), (F.col("bucket") + 1) / F.lit(BUCKETS_PER_DECADE)).alias("upper_s"),
        m_n.alias("measured_n"),
        p_n.alias("predicted_n"),
        F.when(m_n > 0, F.sum("m").over(upto) / m_n).alias("measured_cdf"),
        F.when(p_n > 0, F.sum("p").over(upto) / p_n).alias("predicted_cdf"),
    )


def ks_distance(cdf: DataFrame) -> DataFrame:
    """``run_id, queue, ks, w1_s, measured_n, predicted_n``: null when a side has no sample.

    ``w1_s`` is the Wasserstein-1 distance ∫|F_measured − F_predicted| dx in seconds: between
    two consecutive bucket edges both CDFs are taken at the lower edge (the error is at most
    one bucket's width, ~1.2 % of the latency there).
    """
    edges = Window.partitionBy("run_id", "queue").orderBy("bucket")
    gap = F.abs(F.col("measured_cdf") - F.col("predicted_cdf"))
    width = F.lead("upper_s").over(edges) - F.col("upper_s")
    return (
        cdf.withColumn("gap", gap)
        .withColumn("area", F.col("gap") * F.coalesce(width, F.lit(0.0)))
        .groupBy("run_id", "queue")
        .agg(
            F.max("gap").alias("ks"),
            F.sum("area").alias("w1_s"),
            F.max("measured_n").alias("measured_n"),
            F.max("predicted_n").alias("predicted_n"),
        )
    )


def per_type_latency(acked: DataFrame, messages: DataFrame) -> DataFrame:
    """``run_id, source, replication, flow, latency_count, latency_mean_s, latency_p50/95/99_s``.

    The message type (`flow`) comes from joining the deliveries to the messages on
    (run_id, source, replication, msg_id); a delivery whose message was never recorded is
    counted under type ``"?"``.
    """
    flows = messages.select(*KEYS, "msg_id", "flow")
    joined = acked.select(*KEYS, "msg_id", "latency_s").join(
        flows, on=[*KEYS, "msg_id"], how="left"
    )
    return (
        joined.withColumn("flow", F.coalesce(F.col("flow"), F.lit("?")))
        .groupBy(*KEYS, "flow")
        .agg(*latency_aggregates(F.col("latency_s")))
        .select(*KEYS, "flow", *TYPE_FIGURES)
    )


def queue_flows(messages: DataFrame) -> DataFrame:
    """``run_id, source, queue, flows, flow``: how many message types each queue carries
    (and one of them)."""
    return (
        messages.select("run_id", "source", "queue", "flow")
        .groupBy("run_id", "source", "queue")
        .agg(F.countDistinct("flow").alias("flows"), F.first("flow").alias("flow"))
        .select("run_id", "source", "queue", "flows", "flow")
    )
