"""The load window of each (source, replication), from the ``phase`` events.

A run writes ``phase`` events with detail ``{"phase": "warmup"|"load"|"drain"|"end"}``. The load
window is ``[load_start, load_end)``: the earliest ``load`` event starts it and the earliest
``drain`` event ends it — the rule of `testbed.core.phases.load_window`, which the simulator's
summary calls, written here as a ``min`` over the event rows. Summary
figures use only that window (warm-up and drain are excluded); per-window figures keep every
window and label it with its phase.

A window ``[t, t + w)`` is ``load`` when it lies wholly inside the load window, ``warmup`` when
it starts before ``load_start`` and ``drain`` otherwise, so a window cut by a phase boundary
never counts as load.

`phase_bounds` finds the windows (a transform over the events); :class:`LoadWindows` holds the
collected result — a handful of numbers — and hands the transforms *literal* column
expressions (``CASE WHEN replication = 0 THEN t >= 2.0 AND t < 62.0 ...``) instead of a join,
so filtering ten million rows costs a comparison per row and, within one side, ``source`` stays
a literal the optimizer drops from grouping keys. One `LoadWindows` describes one run.
"""

from __future__ import annotations

__all__ = ["phase_bounds", "LoadWindows", "label_windows"]

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from testbed.core.phases import PHASE

KEYS = ["run_id", "source", "replication"]


def phase_bounds(
    events: DataFrame, replications: DataFrame, default_start: float, default_end: float
) -> DataFrame:
    """``run_id, source, replication, load_start, load_end`` for every row of `replications`.

    `replications` holds the (run_id, source, replication) keys to cover (e.g. the distinct
    keys of the messages). A replication without a ``load`` (``drain``) event takes
    `default_start` (`default_end`): the scenario's warm-up and duration. The earliest
    ``load`` and ``drain`` event of each replication, as `testbed.core.phases.load_window`.
    """
    phase = F.get_json_object(F.col("detail"), "$.phase")
    marks = (
        events.select(*KEYS, "t", "kind", "detail")
        .where(F.col("kind") == PHASE)
        .groupBy(*KEYS)
        .agg(
            F.min(F.when(phase == "load", F.col("t"))).alias("load_start"),
            F.min(F.when(phase == "drain", F.col("t"))).alias("load_end"),
        )
    )
    return (
        replications.select(*KEYS)
        .distinct()
        .join(marks, on=KEYS, how="left")
        .select(
            *KEYS,
            F.coalesce(F.col("load_start"), F.lit(float(default_start))).alias("load_start"),
            F.coalesce(F.col("load_end"), F.lit(float(default_end))).alias("load_end"),
        )
    )


@dataclass(frozen=True)
class LoadWindows:
    """``{(source, replication): (load_start, load_end)}`` of one run, as column expressions."""

    spans: dict[tuple[str, int], tuple[float, float]]

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, int, float, float]]) -> LoadWindows:
        """From ``(source, replication, load_start, load_end)`` tuples."""
        return cls({(str(s), int(r)): (float(a), float(b)) for s, r, a, b in rows})

    @classmethod
    def collect(cls, bounds: DataFrame) -> LoadWindows:
        """Collect a (small) `phase_bounds` frame."""
        rows = bounds.select("source", "replication", "load_start", "load_end").collect()
        return cls.from_rows((r[0], r[1], r[2], r[3]) for r in rows)

    def replications(self, source: str) -> list[int]:
        return sorted(r for s, r in self.spans if s == source)

    def _case(self, pick: int) -> Column:
        expr: Column | None = None
        for (source, rep), span in sorted(self.spans.items()):
            cond = (F.col("source") == F.lit(source)) & (F.col("replication") == F.lit(rep))
            value = F.lit(span[pick])
            expr = F.when(cond, value) if expr is None else expr.when(cond, value)
        return expr if expr is not None else F.lit(None).cast("double")

    def start(self) -> Column:
        """``load_start`` of the row's (source, replication); null for an unknown one."""
        return self._case(0)

    def end(self) -> Column:
        """``load_end`` of the row's (source, replication); null for an unknown one."""
        return self._case(1)

    def contains(self, t: Column, *, right_closed: bool = False) -> Column:
        """Whether `t` lies in ``[load_start, load_end)`` (``(load_start, load_end]`` with
        `right_closed`, for samples that report the second before their time)."""
        expr: Column | None = None
        for (source, rep), (start, end) in sorted(self.spans.items()):
            cond = (F.col("source") == F.lit(source)) & (F.col("replication") == F.lit(rep))
            inside = (
                (t > F.lit(start)) & (t <= F.lit(end))
                if right_closed
                else (t >= F.lit(start)) & (t < F.lit(end))
            )
            expr = F.when(cond, inside) if expr is None else expr.when(cond, inside)
        return F.coalesce(expr, F.lit(False)) if expr is not None else F.lit(False)


def label_windows(frame: DataFrame, load: LoadWindows, window_s: float) -> DataFrame:
    """`frame` (with ``source, replication, window``) plus ``t_start`` and ``phase``."""
    t_start = F.col("window").cast("double") * F.lit(float(window_s))
    eps = 1e-9
    phase = (
        F.when(t_start < load.start() - eps, F.lit("warmup"))
        .when(t_start + F.lit(float(window_s)) <= load.end() + eps, F.lit("load"))
        .otherwise(F.lit("drain"))
    )
    return frame.withColumn("t_start", t_start).withColumn("phase", phase)
