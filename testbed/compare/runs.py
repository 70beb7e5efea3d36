"""The measured side of one run directory, reduced by Spark to the small frames a comparison
needs.

The figures are those of the report (:mod:`testbed.analysis.metrics`, over the load window
of each replication, warm-up and drain excluded); only the whole run (queue ``"*"``) is kept.
Besides the per-replication figures (and the per-window frame, for the plots), the load
window cut in short *slices* travels to the driver: per slice the acks done in it, the count,
sum and histogram of the latencies of the messages published in it, and the queue depth per
broker sample. Ratios of their sums give the run's figures exactly, so a run with one
replication can be resampled by blocks of slices (:mod:`testbed.compare.intervals`) without
touching the deliveries again.
"""

from __future__ import annotations

__all__ = ["MeasuredRun", "load_measured", "check_run_dir", "slice_width", "MIN_SLICES"]

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from testbed.analysis.latency import acked_in_load, bucket_upper_s, latency_histogram
from testbed.analysis.metrics import replication_metrics
from testbed.analysis.phases import LoadWindows, phase_bounds
from testbed.analysis.readers import RunFrames, has_tables, read_ledgers, read_run
from testbed.analysis.windows import OVERALL, window_index, window_metrics
from testbed.core.records import Ledger
from testbed.core.scenario_loader import load_scenario
from testbed.exceptions import ConfigurationError

KEYS = ["run_id", "source", "replication"]
MIN_SLICES = 40
"""Fewest resampling units per load window (see :func:`slice_width`)."""
LEDGER_METRICS = {"losses": "lost", "duplicates": "duplicated"}
"""Ledger counts compared as metrics, by the names ``analysis/summary.json`` gives them."""
WINDOW_FIELDS = [
    "replication",
    "window",
    "t_start",
    "phase",
    "publish_rate",
    "ack_rate",
    "latency_count",
    "latency_mean_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "queue_depth",
]


@dataclass
class MeasuredRun:
    """One run's measured figures (whole run), collected to the driver."""

    run_dir: Path
    run_id: str
    scenario: str
    scenario_digest: str
    """SHA-256 of the run's resolved ``scenario.yaml`` minus its ``seed`` line: equal when two
    runs ran the same scenario with the same settings (seeds may differ)."""
    window_s: float
    slice_s: float
    """Width of the resampling unit (:func:`slice_width`)."""
    replications: list[int]
    metrics: pd.DataFrame
    """``replication, metric, value``: the report's per-replication figures and the ledger
    counts (``losses``, ``duplicates``)."""
    windows: pd.DataFrame
    """Every window of every replication (columns :data:`WINDOW_FIELDS`), for the plots."""
    units: pd.DataFrame
    """The resampling units, slices of the load window in time order: ``replication, slice,
    length, acks, lat_n, lat_sum`` (acks done in the slice; count and sum of the latencies of
    the messages published in it)."""
    histogram: pd.DataFrame
    """Latency histogram of the messages published in each slice: ``replication, slice,
    bucket, n``."""
    depth: pd.DataFrame
    """The whole run's queue depth per broker sample in the load window:
    ``replication, t, depth``."""
    cdf: pd.DataFrame
    """Latency CDF at bucket edges, replications pooled: ``bucket, upper_s, cdf, n``."""
    ledgers: list[Ledger]

    def values(self, metric: str) -> list[float]:
        """The per-replication values of `metric`, in replication order."""
        sel = self.metrics[self.metrics.metric == metric].sort_values("replication")
        return [float(v) for v in sel["value"]]


def check_run_dir(run_dir: Path) -> None:
    """Raise ConfigurationError unless `run_dir` is a run directory with measured records."""
    if not run_dir.is_dir():
        raise ConfigurationError(f"{run_dir}: no such directory")
    if not (run_dir / "scenario.yaml").is_file():
        raise ConfigurationError(
            f"{run_dir} is not a run directory: it has no scenario.yaml "
            "(give the directories `mqbed run` writes, e.g. runs/<time>-<scenario>)"
        )
    if not has_tables(run_dir / "measured"):
        raise ConfigurationError(
            f"{run_dir} has no measured data: measured/ holds no messages or deliveries "
            "(a prediction alone, or a run that ended before it recorded anything)"
        )


def _digest(text: str) -> str:
    kept = [line for line in text.splitlines() if not line.startswith("seed:")]
    return hashlib.sha256("\n".join(kept).encode("utf-8")).hexdigest()


def _cdf(histogram: pd.DataFrame) -> pd.DataFrame:
    """``bucket, upper_s, cdf, n`` at the bucket edges, replications pooled (as
    :func:`testbed.analysis.latency.latency_cdf`, on the collected histogram: a few hundred
    rows, not worth a Spark job)."""
    counts = histogram.groupby("bucket")["n"].sum().sort_index()
    total = float(counts.sum())
    return pd.DataFrame(
        {
            "bucket": counts.index.astype(int),
            "upper_s": [bucket_upper_s(int(b)) for b in counts.index],
            "cdf": counts.cumsum().to_numpy(dtype=float) / total if total else float("nan"),
            "n": int(total),
        }
    )


def _local(frame: DataFrame) -> pd.DataFrame:
    return cast(pd.DataFrame, frame.toPandas())


def slice_width(window_s: float, spans: list[float]) -> float:
    """The resampling unit's width: the recording window, shortened so that the shortest load
    window holds at least :data:`MIN_SLICES` of them (a few-second run still has enough
    units for a block bootstrap); never below 10 ms."""
    shortest = min(spans) if spans else window_s
    return max(0.01, min(window_s, shortest / MIN_SLICES))


def _slice_frames(
    frames: RunFrames, acked: DataFrame, load: LoadWindows, slice_s: float
) -> dict[str, pd.DataFrame]:
    """Per slice of the load window: the acks done in it, the latency count and sum of the
    messages published in it and their histogram; and the whole run's depth per sample."""
    rep = F.col("replication")
    latency = acked.groupBy(rep, window_index(F.col("t_publish"), slice_s).alias("slice")).agg(
        F.count("latency_s").alias("lat_n"), F.sum("latency_s").alias("lat_sum")
    )
    done = F.col("t_done")
    acks = (
        frames.deliveries.where((F.col("outcome") == "acked") & load.contains(done))
        .groupBy(rep, window_index(done, slice_s).alias("slice"))
        .agg(F.count(F.lit(1)).alias("acks"))
    )
    histogram = latency_histogram(acked, slice_s).where(F.col("queue") == OVERALL)
    depth = (
        frames.timeseries.where(load.contains(F.col("t"), right_closed=True))
        .groupBy(rep, "t")
        .agg(F.sum(F.col("depth_ready") + F.col("depth_unacked")).alias("depth"))
    )
    return {
        "latency": _local(latency),
        "acks": _local(acks),
        "histogram": _local(histogram.select(rep, F.col("window").alias("slice"), "bucket", "n")),
        "depth": _local(depth.orderBy("replication", "t")),
    }


def _units(
    parts: dict[str, pd.DataFrame], spans: dict[int, tuple[float, float]], s: float
) -> pd.DataFrame:
    """``replication, slice, length, acks, lat_n, lat_sum``: every slice that overlaps a load
    window, `length` the overlap (so Σacks/Σlength is the run's throughput exactly)."""
    rows = []
    for rep, (start, end) in sorted(spans.items()):
        first, last = math.floor(start / s), math.ceil(end / s)
        for k in range(first, last):
            length = min(end, (k + 1) * s) - max(start, k * s)
            if length > 0:
                rows.append({"replication": rep, "slice": k, "length": length})
    units = pd.DataFrame(rows, columns=["replication", "slice", "length"])
    for name in ("latency", "acks"):
        units = units.merge(parts[name], on=["replication", "slice"], how="left")
    return units.fillna({"acks": 0, "lat_n": 0, "lat_sum": 0.0}).sort_values(
        ["replication", "slice"], ignore_index=True
    )


def load_measured(spark: SparkSession, run_dir: Path) -> MeasuredRun:
    """Read `run_dir`'s measured side and reduce it (see the module docstring).

    Raises ConfigurationError for a directory that is not a run, or a run without measured
    deliveries in its load window."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    scenario_text = (run_dir / "scenario.yaml").read_text(encoding="utf-8")
    scenario = load_scenario(run_dir / "scenario.yaml")
    window_s = float(scenario.recording.window)
    frames = read_run(spark, run_dir).side("measured")
    keys = frames.events.select(*KEYS).unionByName(frames.timeseries.select(*KEYS))
    bounds = _local(phase_bounds(frames.events, keys, scenario.warmup, scenario.duration))
    load = LoadWindows.from_rows(
        (r.source, r.replication, r.load_start, r.load_end) for r in bounds.itertuples()
    )
    spans = {int(r): span for (_, r), span in load.spans.items()}
    slice_s = slice_width(window_s, [b - a for a, b in spans.values()])
    acked = acked_in_load(frames.deliveries, load).localCheckpoint(eager=True)
    windows = window_metrics(
        frames.messages, frames.deliveries, frames.timeseries, load, window_s
    ).localCheckpoint(eager=True)
    whole = F.col("queue") == OVERALL
    records = (frames.deliveries, frames.messages)
    metrics = replication_metrics(windows, records, acked, load).where(whole)
    metrics_pd = _local(metrics.select("replication", "metric", "value"))
    if metrics_pd[metrics_pd.metric == "latency_count"].value.sum() <= 0:
        raise ConfigurationError(
            f"{run_dir} has no measured data: no message published in the load window was "
            "acknowledged"
        )
    windows_pd = _local(windows.where(whole).select(*WINDOW_FIELDS))
    parts = _slice_frames(frames, acked, load, slice_s)
    reps = sorted(spans)
    ledgers = read_ledgers(run_dir / "measured", reps)
    rows = [
        {"replication": rep, "metric": name, "value": float(getattr(ledger, field))}
        for rep, ledger in zip(reps, ledgers, strict=True)
        for name, field in LEDGER_METRICS.items()
    ]
    metrics_pd = pd.concat([metrics_pd, pd.DataFrame(rows)], ignore_index=True)
    return MeasuredRun(
        run_dir=run_dir,
        run_id=run_dir.name,
        scenario=scenario.name,
        scenario_digest=_digest(scenario_text),
        window_s=window_s,
        slice_s=slice_s,
        replications=reps,
        metrics=metrics_pd,
        windows=windows_pd,
        units=_units(parts, spans, slice_s),
        histogram=parts["histogram"],
        depth=parts["depth"],
        cdf=_cdf(parts["histogram"]),
        ledgers=ledgers,
    )
