"""Measured ⟷ predicted, window by window: the join and the across-window scores.

`pair_windows` joins the per-window frame's two sides on (run_id, replication, queue, window):
measured replication r pairs with predicted replication r (a prediction usually has more
replications than the live run; the extra ones pair with nothing and are left out here).

`window_scores` judges each series over the paired *load* windows (docs/models.md §10):

- ``mape``: mean of ``|p − m| / |m|`` over windows with ``m ≠ 0`` — a fraction, not percent;
- ``pearson_r``: Pearson correlation of (m, p) across windows; null when either side is
  constant (no variance, no correlation to speak of) or fewer than two windows pair.
"""

from __future__ import annotations

__all__ = ["SERIES", "PAIR_KEYS", "pair_windows", "window_scores"]

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SERIES = [
    "ack_rate",
    "publish_rate",
    "deliver_rate",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "queue_depth",
    "consumers",
]
PAIR_KEYS = ["run_id", "replication", "queue", "window"]


def pair_windows(windows: DataFrame, series: list[str] | None = None) -> DataFrame:
    """``PAIR_KEYS, t_start, phase, m_<series>, p_<series>`` for windows both sides have."""
    series = series or SERIES
    measured = windows.where(F.col("source") == "measured").select(
        *PAIR_KEYS, "t_start", "phase", *[F.col(s).alias(f"m_{s}") for s in series]
    )
    predicted = windows.where(F.col("source") == "predicted").select(
        *PAIR_KEYS, *[F.col(s).alias(f"p_{s}") for s in series]
    )
    return measured.join(predicted, on=PAIR_KEYS, how="inner").select(
        *PAIR_KEYS,
        "t_start",
        "phase",
        *[f"m_{s}" for s in series],
        *[f"p_{s}" for s in series],
    )


def window_scores(paired: DataFrame, series: list[str] | None = None) -> DataFrame:
    """``run_id, queue, series, n, mape, pearson_r`` over the paired load windows."""
    series = series or SERIES
    pairs = F.explode(
        F.array(
            *[
                F.struct(
                    F.lit(s).alias("series"),
                    F.col(f"m_{s}").cast("double").alias("m"),
                    F.col(f"p_{s}").cast("double").alias("p"),
                )
                for s in series
            ]
        )
    ).alias("pair")
    stacked = (
        paired.where(F.col("phase") == "load")
        .select("run_id", "queue", pairs)
        .select("run_id", "queue", "pair.series", "pair.m", "pair.p")
    )
    both = stacked.where(F.col("m").isNotNull() & F.col("p").isNotNull())
    ape = F.when(F.col("m") != 0, F.abs(F.col("p") - F.col("m")) / F.abs(F.col("m")))
    r = F.corr("m", "p")
    return (
        both.groupBy("run_id", "queue", "series")
        .agg(F.count(F.lit(1)).alias("n"), F.avg(ape).alias("mape"), r.alias("pearson_r"))
        .select(
            "run_id",
            "queue",
            "series",
            "n",
            "mape",
            F.when(F.isnan("pearson_r"), F.lit(None))
            .otherwise(F.col("pearson_r"))
            .alias("pearson_r"),
        )
    )
