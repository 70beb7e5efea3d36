"""The correlation job for one run directory: read both sides, transform, write ``analysis/``.

    with spark_scope() as spark:
        result = analyse_run(spark, Path("runs/20261121T063114Z-quickstart"))
    result.summary["metrics"]

Writes into ``<run_dir>/analysis/``:

- ``windows.parquet``: the per-window frame of both sides (``source`` column; columns in
  :data:`testbed.analysis.windows.WINDOW_COLUMNS`; queue ``"*"`` is the whole run; every
  window of the run, with its ``phase``);
- ``summary.json``: the verdict (:mod:`testbed.analysis.summary`);
- ``latency_cdf.parquet`` and ``latency_by_type.parquet``: the latency CDFs at bucket edges and
  the per-message-type latency table, for the report.

Reading and writing happen here and in :mod:`testbed.analysis.readers`; everything between is
a pure ``DataFrame -> DataFrame`` transform. Only small, aggregated frames reach the driver.
"""

from __future__ import annotations

__all__ = ["RunAnalysis", "analyse_run", "KEYS"]

import json
import os
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from testbed.analysis.latency import (
    acked_in_load,
    ks_distance,
    latency_cdf,
    latency_histogram,
    per_type_latency,
    queue_flows,
)
from testbed.analysis.metrics import per_type_from_queues, replication_metrics
from testbed.analysis.pairing import pair_windows, window_scores
from testbed.analysis.phases import LoadWindows, phase_bounds
from testbed.analysis.qos import loss_table
from testbed.analysis.readers import (
    SIDES,
    RunFrames,
    column_values,
    read_json,
    read_ledgers,
    read_run,
)
from testbed.analysis.summary import SummaryInputs, build_summary
from testbed.analysis.windows import window_metrics
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario
from testbed.exceptions import ConfigurationError

KEYS = ["run_id", "source", "replication"]


@dataclass
class RunAnalysis:
    """What the job computed for one run (small pandas frames) and where it wrote them."""

    run_dir: Path
    run_id: str
    scenario_name: str
    scenario_yaml: str
    environment: dict[str, Any] | None
    summary: dict[str, Any]
    windows: pd.DataFrame
    cdf: pd.DataFrame
    per_type: pd.DataFrame
    events: pd.DataFrame
    has_prediction: bool
    files: dict[str, Path] = field(default_factory=dict)


def _local(frame: DataFrame) -> pd.DataFrame:
    """Collect a small (aggregated) frame to the driver."""
    return cast(pd.DataFrame, frame.toPandas())


def _materialise(spark: SparkSession, frame: DataFrame) -> tuple[DataFrame, pd.DataFrame]:
    """Collect a small frame and hand back an equivalent in-memory Spark frame."""
    local = _local(frame)
    return spark.createDataFrame(local, schema=frame.schema), local


def _write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    os.replace(tmp, path)
    return path


def _write_json(data: dict[str, Any], path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class _Layout:
    """What each side's deliveries look like: decides cheaper plans (see `_side_frames`)."""

    flows: DataFrame
    """``queue_flows`` of the messages (or the same from the Parquet footers)."""
    type_by_queue: dict[str, bool]
    """Per side: each queue the deliveries name carries one message type and each type one
    queue, so per-type latency is per-queue latency under another name."""
    single_queue: dict[str, bool]
    """Per side: the deliveries name exactly one queue."""


def _layout(spark: SparkSession, frames: RunFrames) -> _Layout:
    """From the Parquet footers when they tell (one type per side), else by a scan of the
    queue and type columns."""
    type_by_queue: dict[str, bool] = {}
    single_queue: dict[str, bool] = {}
    lookup: list[tuple[str, str, str, int, str]] = []
    for side in frames.sides:
        queues = column_values(frames.run_dir / side, "deliveries", "queue")
        types = column_values(frames.run_dir / side, "messages", "flow")
        if queues is None or types is None or len(types) != 1:
            return _scanned_layout(spark, frames)
        single_queue[side] = type_by_queue[side] = len(queues) == 1
        (flow,) = types
        lookup.extend((frames.run_id, side, q, 1, flow) for q in sorted(queues))
    schema = "run_id string, source string, queue string, flows long, flow string"
    return _Layout(spark.createDataFrame(lookup, schema), type_by_queue, single_queue)


def _scanned_layout(spark: SparkSession, frames: RunFrames) -> _Layout:
    flows, flows_pd = _materialise(spark, queue_flows(frames.messages))
    seen = _local(frames.deliveries.select("source", "queue").distinct())
    type_by_queue, single_queue = {}, {}
    for side in SIDES:
        queues = {r.queue for r in seen.itertuples() if r.source == side}
        known = flows_pd[(flows_pd.source == side) & flows_pd.queue.isin(queues)]
        type_by_queue[side] = (
            len(known) == len(queues) and bool((known.flows == 1).all()) and known.flow.is_unique
        )
        single_queue[side] = len(queues) == 1
    return _Layout(flows, type_by_queue, single_queue)


def _side_frames(
    frames: RunFrames, load: LoadWindows, layout: _Layout, window_s: float
) -> dict[str, DataFrame]:
    """Windows, histogram and per-replication metrics, computed side by side and stacked:
    within one side ``source`` and ``run_id`` are literals, and a single-queue side
    aggregates each row once."""
    parts: dict[str, list[DataFrame]] = {"windows": [], "histogram": [], "metrics": []}
    for source in frames.sides or ("measured",):
        f = frames.side(source)
        single = layout.single_queue.get(source, False)
        acked = acked_in_load(f.deliveries, load)
        windows = window_metrics(
            f.messages, f.deliveries, f.timeseries, load, window_s, single_queue=single
        ).localCheckpoint(eager=True)
        metrics = replication_metrics(
            windows, (f.deliveries, f.messages), acked, load, single_queue=single
        )
        parts["windows"].append(windows)
        parts["histogram"].append(latency_histogram(acked, window_s))
        parts["metrics"].append(metrics)
    return {name: reduce(DataFrame.unionByName, frames_) for name, frames_ in parts.items()}


def _per_type(
    frames: RunFrames, metrics: DataFrame, load: LoadWindows, layout: _Layout
) -> DataFrame:
    """Per-type latency per side: from the (materialised) per-queue figures when types and
    queues correspond one to one, else by joining deliveries to messages."""
    parts = []
    for source in frames.sides or ("measured",):
        if layout.type_by_queue.get(source, False):
            mine = metrics.where(F.col("source") == source)
            parts.append(per_type_from_queues(mine, layout.flows))
        else:
            f = frames.side(source)
            parts.append(per_type_latency(acked_in_load(f.deliveries, load), f.messages))
    return reduce(DataFrame.unionByName, parts)


def _restart_used(predicted_summary: dict[str, Any] | None) -> float | None:
    """The broker restart time the prediction used (its summary's profile header), for the
    closed-form QoS table (docs/models.md §6); None: the per-kind constant."""
    used = (predicted_summary or {}).get("profile") or {}
    value = used.get("restart_s")
    return float(value) if value is not None else None


@dataclass(frozen=True)
class _Collected:
    """The small frames the Spark side hands to the driver (`_collect`)."""

    bounds: pd.DataFrame
    """Per (source, replication): the load window (``load_start``, ``load_end``)."""
    windows: pd.DataFrame
    cdf: pd.DataFrame
    ks: pd.DataFrame
    histogram_measured: pd.DataFrame
    metrics: pd.DataFrame
    scores: pd.DataFrame
    per_type: pd.DataFrame
    events: pd.DataFrame


def analyse_run(spark: SparkSession, run_dir: Path) -> RunAnalysis:
    """Correlate one run's measured and predicted records; write ``analysis/``."""
    run_dir = Path(run_dir)
    if not (run_dir / "scenario.yaml").is_file():
        raise ConfigurationError(f"{run_dir} is not a run directory: it has no scenario.yaml")
    scenario = load_scenario(run_dir / "scenario.yaml")
    window_s = float(scenario.recording.window)
    frames = read_run(spark, run_dir)
    got = _collect(spark, frames, scenario, window_s)
    summary, has_prediction = _summarise(run_dir, frames, scenario, window_s, got)

    out = run_dir / "analysis"
    out.mkdir(exist_ok=True)
    files = {
        "windows": _write_parquet(got.windows, out / "windows.parquet"),
        "summary": _write_json(summary, out / "summary.json"),
        "latency_cdf": _write_parquet(got.cdf, out / "latency_cdf.parquet"),
        "latency_by_type": _write_parquet(got.per_type, out / "latency_by_type.parquet"),
    }
    environment = read_json(run_dir / "environment.json")
    return RunAnalysis(
        run_dir=run_dir,
        run_id=frames.run_id,
        scenario_name=scenario.name,
        scenario_yaml=(run_dir / "scenario.yaml").read_text(encoding="utf-8"),
        environment=environment,
        summary=summary,
        windows=got.windows,
        cdf=got.cdf,
        per_type=got.per_type,
        events=got.events,
        has_prediction=has_prediction,
        files=files,
    )


def _collect(
    spark: SparkSession, frames: RunFrames, scenario: Scenario, window_s: float
) -> _Collected:
    """All the Spark work of the job: load windows, per-window frame, latency CDFs and
    histogram, per-replication metrics, window scores, per-type latency and events, each
    collected to the driver. The order of the collections and what is checkpointed decide
    how often Spark recomputes a frame: keep them."""
    keys = frames.events.select(*KEYS).unionByName(frames.timeseries.select(*KEYS))
    bounds_pd = _local(phase_bounds(frames.events, keys, scenario.warmup, scenario.duration))
    load = LoadWindows.from_rows(
        (r.source, r.replication, r.load_start, r.load_end) for r in bounds_pd.itertuples()
    )
    layout = _layout(spark, frames)
    stacked = _side_frames(frames, load, layout, window_s)
    windows = stacked["windows"]
    windows_pd = _local(windows).sort_values(["source", "replication", "queue", "window"])
    windows_pd = windows_pd.reset_index(drop=True)
    histogram = stacked["histogram"].localCheckpoint(eager=True)
    cdf = latency_cdf(histogram).localCheckpoint(eager=True)
    cdf_pd = _local(cdf.orderBy("queue", "bucket"))
    ks_pd = _local(ks_distance(cdf))
    hist_measured = _local(histogram.where(F.col("source") == "measured"))
    metrics = stacked["metrics"].localCheckpoint(eager=True)
    metrics_pd = _local(metrics)
    scores_pd = _local(window_scores(pair_windows(windows)))
    per_type_pd = _local(_per_type(frames, metrics, load, layout))
    events_pd = _local(frames.events.where(F.col("kind") != "phase").orderBy("t"))
    return _Collected(
        bounds=bounds_pd,
        windows=windows_pd,
        cdf=cdf_pd,
        ks=ks_pd,
        histogram_measured=hist_measured,
        metrics=metrics_pd,
        scores=scores_pd,
        per_type=per_type_pd,
        events=events_pd,
    )


def _summarise(
    run_dir: Path, frames: RunFrames, scenario: Scenario, window_s: float, got: _Collected
) -> tuple[dict[str, Any], bool]:
    """The verdict (`build_summary`) with the prediction's summary and both sides' ledgers
    read from the run directory, plus the QoS loss table; and whether the run has a
    prediction at all."""
    bounds_pd = got.bounds
    predicted_dir = run_dir / "predicted"
    predicted_summary = read_json(predicted_dir / "summary.json")
    has_prediction = "predicted" in frames.sides or bool(
        predicted_summary and predicted_summary.get("metrics")
    )
    reps = {
        side: sorted(int(r) for r in bounds_pd[bounds_pd.source == side].replication)
        for side in ("measured", "predicted")
    }
    ledgers = {side: read_ledgers(run_dir / side, reps[side]) for side in reps if reps[side]}
    inputs = SummaryInputs(
        run_id=frames.run_id,
        scenario=scenario.name,
        targets=scenario.accuracy.model_dump(),
        window_s=window_s,
        metrics=got.metrics,
        windows=got.windows[got.windows.source == "measured"],
        histogram=got.histogram_measured,
        ledgers=ledgers,
        ledger_files={
            "measured": read_json(run_dir / "measured" / "ledger.json"),
            "predicted": read_json(predicted_dir / "ledger.json"),
        },
        scores=got.scores,
        ks=got.ks,
        has_prediction=has_prediction,
        overload=scenario.overload,
        predicted_summary=None if "predicted" in frames.sides else predicted_summary,
        extra={
            "load_window": {
                f"{r.source}/r{r.replication}": [r.load_start, r.load_end]
                for r in bounds_pd.itertuples()
            },
            "prediction_method": (predicted_summary or {}).get("method"),
            "profile": (predicted_summary or {}).get("profile"),
        },
    )
    summary = build_summary(inputs)
    qos = loss_table(scenario, ledgers, got.events, _restart_used(predicted_summary))
    if qos is not None:
        summary["qos_loss"] = qos
    if not reps["predicted"] and has_prediction:
        summary["predicted_replications"] = (predicted_summary or {}).get("replications")
    return summary, has_prediction
