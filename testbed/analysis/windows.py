"""Per-window metrics: one row per (run_id, source, replication, queue, window).

Windows are ``[k·w, (k+1)·w)`` seconds since the workload start, ``w`` being the scenario's
``recording.window`` (1 s by default); ``window`` is ``k``. Rates come from the records, not
from the broker's counters:

- ``publish_rate``: messages with ``t_publish`` in the window, per second;
- ``deliver_rate``: delivery attempts (every outcome but ``unroutable``, a returned publish
  that reached no consumer) with ``t_deliver`` in the window;
- ``ack_rate``: ``acked`` deliveries with ``t_done`` in the window (the throughput);
- ``latency_*``: ``latency_s`` of the ``acked`` deliveries of messages *published* in the window
  (publish time = ``t_deliver - latency_s``), so a window's latency belongs to the messages sent
  in it — the same population as the summary's latency figures;
- ``depth_ready``, ``depth_unacked``, ``consumers``, ``producers_blocked``: means of the
  broker timeseries samples in the window; ``queue_depth = depth_ready + depth_unacked``;
- ``published_in_load``, ``acked_in_load``: of this window's publishes and acks, how many
  fall in the load window (counts; the summary's rates are their sums over the load span).

Percentiles use ``percentile_approx`` with ``accuracy = PERCENTILE_ACCURACY = 10_000``: the
returned value's rank is within ``n / 10_000`` of the exact rank (relative rank error ≤ 0.01 %,
so a reported p95 lies between the exact p94.99 and p95.01).

Queue ``"*"`` is the whole run: rates and depths summed over queues, latencies pooled (a
string key, not null, so the measured and predicted frames join on it). Windows before t=0
(broker samples taken while the workers start) are dropped.
"""

from __future__ import annotations

__all__ = [
    "PERCENTILE_ACCURACY",
    "OVERALL",
    "WINDOW_COLUMNS",
    "window_index",
    "by_queue_and_overall",
    "counts_by_queue_and_overall",
    "window_metrics",
    "latency_aggregates",
]

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from testbed.analysis.phases import LoadWindows, label_windows

PERCENTILE_ACCURACY = 10_000
OVERALL = "*"
KEYS = ["run_id", "source", "replication"]
WINDOW_COLUMNS = [
    *KEYS,
    "queue",
    "window",
    "t_start",
    "phase",
    "publish_rate",
    "deliver_rate",
    "ack_rate",
    "latency_count",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "depth_ready",
    "depth_unacked",
    "queue_depth",
    "consumers",
    "producers_blocked",
    "published_in_load",
    "acked_in_load",
]
_COUNTS = ["latency_count", "published_in_load", "acked_in_load"]


def window_index(t: Column, window_s: float) -> Column:
    """The window number of time `t` (seconds)."""
    return F.floor(t / F.lit(float(window_s))).cast("long")


def _fan_out(frame: DataFrame) -> DataFrame:
    """Each row twice: under its queue and under the whole run (``"*"``)."""
    queue = F.coalesce(F.col("queue"), F.lit("?"))
    return frame.withColumn("queue", F.explode(F.array(queue, F.lit(OVERALL))))


def by_queue_and_overall(
    frame: DataFrame, keys: list[str], *aggs: Column, single_queue: bool = False
) -> DataFrame:
    """`aggs` grouped by ``keys + queue`` and by `keys` alone (queue ``"*"``), in one pass
    (``groupingSets``: every row is aggregated twice).

    With ``single_queue`` (the caller knows `frame` holds one queue) the whole-run rows are
    copies of the queue's, and every row is aggregated once.
    """
    if single_queue:
        return _fan_out(frame.groupBy(*keys, "queue").agg(*aggs))
    grouped = frame.groupingSets([[*keys, "queue"], keys], *keys, "queue").agg(
        *aggs, F.grouping("queue").alias("_overall")
    )
    queue = F.when(F.col("_overall") == 1, F.lit(OVERALL)).otherwise(
        F.coalesce(F.col("queue"), F.lit("?"))
    )
    return grouped.withColumn("queue", queue).drop("_overall")


def counts_by_queue_and_overall(
    frame: DataFrame, keys: list[str], counts: dict[str, Column]
) -> DataFrame:
    """Sums of `counts` (per-row weights) by ``keys + queue`` and by `keys` alone (queue
    ``"*"``). Additive, so the rows are aggregated once per queue and the (few) per-queue
    results are summed again for the whole run."""
    per_queue = frame.groupBy(*keys, "queue").agg(
        *[F.sum(c).alias(name) for name, c in counts.items()]
    )
    return (
        _fan_out(per_queue)
        .groupBy(*keys, "queue")
        .agg(*[F.sum(name).alias(name) for name in counts])
    )


def latency_aggregates(latency: Column) -> list[Column]:
    """count, mean, p50, p95, p99 of `latency` (``percentile_approx`` at the module accuracy)."""
    pct = F.percentile_approx(latency, [0.5, 0.95, 0.99], PERCENTILE_ACCURACY)
    return [
        F.count(latency).alias("latency_count"),
        F.avg(latency).alias("latency_mean_s"),
        pct.getItem(0).alias("latency_p50_s"),
        pct.getItem(1).alias("latency_p95_s"),
        pct.getItem(2).alias("latency_p99_s"),
    ]


def _record_counts(
    messages: DataFrame, deliveries: DataFrame, load: LoadWindows, window_s: float
) -> DataFrame:
    """Publish, deliver and ack rates (and the load-window counts) in one hash aggregation.

    Every record contributes tagged rows: a message tag 0 (its publish window), a delivery
    tag 1 (its deliver window) and, when acked, tag 2 (its done window), each flagged when
    its time lies in the load window; one grouped pass counts each tag.
    """

    def tag(what: int, t: Column, in_load: Column) -> Column:
        return F.struct(
            F.lit(what).alias("what"),
            window_index(t, window_s).alias("window"),
            in_load.alias("in_load"),
        )

    published = messages.select(
        *KEYS,
        "queue",
        tag(0, F.col("t_publish"), load.contains(F.col("t_publish"))).alias("e"),
    )
    acked_done = F.when(F.col("outcome") == "acked", F.col("t_done"))
    delivered = deliveries.select(
        *KEYS,
        "queue",
        F.explode(
            F.array(
                tag(1, F.when(F.col("outcome") != "unroutable", F.col("t_deliver")), F.lit(False)),
                tag(2, acked_done, load.contains(acked_done)),
            )
        ).alias("e"),
    )
    rows = (
        published.unionByName(delivered)
        .select(*KEYS, "queue", "e.what", "e.window", "e.in_load")
        .where(F.col("window").isNotNull() & (F.col("window") >= 0))
    )
    names = ["publish_rate", "deliver_rate", "ack_rate"]
    counts = {name: (F.col("what") == i).cast("long") for i, name in enumerate(names)}
    counts["published_in_load"] = ((F.col("what") == 0) & F.col("in_load")).cast("long")
    counts["acked_in_load"] = ((F.col("what") == 2) & F.col("in_load")).cast("long")
    counted = counts_by_queue_and_overall(rows, [*KEYS, "window"], counts)
    per_s = F.lit(float(window_s))
    return counted.select(
        *KEYS,
        "queue",
        "window",
        *[(F.col(n) / per_s).alias(n) for n in names],
        "published_in_load",
        "acked_in_load",
    )


def _latencies(deliveries: DataFrame, window_s: float, single_queue: bool) -> DataFrame:
    """Latency summaries of acked deliveries by publish window (``t_deliver − latency_s``)."""
    acked = deliveries.where((F.col("outcome") == "acked") & F.col("latency_s").isNotNull()).select(
        *KEYS,
        "queue",
        window_index(F.col("t_deliver") - F.col("latency_s"), window_s).alias("window"),
        "latency_s",
    )
    return by_queue_and_overall(
        acked.where(F.col("window") >= 0),
        [*KEYS, "window"],
        *latency_aggregates(F.col("latency_s")),
        single_queue=single_queue,
    )


def _broker_samples(timeseries: DataFrame, window_s: float) -> DataFrame:
    """Window means of the broker samples per queue; the whole run sums the queues' means."""
    cols = ["depth_ready", "depth_unacked", "consumers", "producers_blocked"]
    per_queue = (
        timeseries.select(*KEYS, "queue", window_index(F.col("t"), window_s).alias("window"), *cols)
        .where(F.col("window") >= 0)
        .groupBy(*KEYS, "queue", "window")
        .agg(*[F.avg(c).alias(c) for c in cols])
    )
    return (
        _fan_out(per_queue)
        .groupBy(*KEYS, "queue", "window")
        .agg(*[F.sum(c).alias(c) for c in cols])
    )


def window_metrics(
    messages: DataFrame,
    deliveries: DataFrame,
    timeseries: DataFrame,
    load: LoadWindows,
    window_s: float,
    *,
    single_queue: bool = False,
) -> DataFrame:
    """The per-window frame (columns `WINDOW_COLUMNS`) of stacked measured/predicted tables.

    `load` (:class:`testbed.analysis.phases.LoadWindows`) labels each window's phase.
    ``single_queue``: the deliveries name one queue (see `by_queue_and_overall`).
    """
    messages = messages.select(*KEYS, "queue", "t_publish")
    deliveries = deliveries.select(*KEYS, "queue", "t_deliver", "t_done", "outcome", "latency_s")
    parts = [
        _record_counts(messages, deliveries, load, window_s),
        _latencies(deliveries, window_s, single_queue),
        _broker_samples(timeseries, window_s),
    ]
    stacked = parts[0]
    for part in parts[1:]:
        stacked = stacked.unionByName(part, allowMissingColumns=True)
    value_cols = [
        c
        for c in WINDOW_COLUMNS
        if c not in (*KEYS, "queue", "window", "t_start", "phase", "queue_depth")
    ]
    merged = stacked.groupBy(*KEYS, "queue", "window").agg(*[F.max(c).alias(c) for c in value_cols])
    merged = merged.fillna(0.0, subset=["publish_rate", "deliver_rate", "ack_rate"])
    merged = merged.fillna(0, subset=_COUNTS)
    merged = merged.withColumn("queue_depth", F.col("depth_ready") + F.col("depth_unacked"))
    return label_windows(merged, load, window_s).select(*WINDOW_COLUMNS)
