"""The confirm table of a client path: publish → confirm of persistent messages (§9).

The calibration's *confirmed* stream (`testbed.calibration.client_path`) publishes persistent
messages to a durable queue and asks for confirms; its ``messages`` rows carry both
times. Per load phase, their difference is the ``confirm`` table the simulator draws a
confirmed persistent publish's confirm from. It replaces the broker micro-benchmark's constant
persistence cost plus a moment-matched residual, which put a point mass at one value (p10 = p50
= 1.47 ms predicted on the RabbitMQ broker-kill scenario, measured p10 0.86 ms, p50 1.26 ms), and
it says when the broker had the message on disk — what a kill keeps (docs/models.md §6).
"""

from __future__ import annotations

__all__ = ["MIN_SAMPLE", "confirm_points", "read_sends"]

from pathlib import Path

import pandas as pd

from testbed.calibration.path_scenario import PHASES, phase_of
from testbed.calibration.path_streams import SMALL
from testbed.core.client_path import PathPoint, PointFit
from testbed.core.quantiles import quantile_table

MIN_SAMPLE = 50
"""Fewest values a stored table is built from (a point with fewer is left out)."""


def confirm_points(
    messages: pd.DataFrame, scale: float, queue: str = "mqbed-cal-confirmed"
) -> tuple[list[PathPoint], list[PointFit]]:
    """The confirm points (one per load phase) of ``queue``'s confirmed sends."""
    m = messages[(messages.queue == queue) & messages.t_confirm.notna()]
    m = m[m.t_publish.notna()]
    rates = {ph.name: ph.total for ph in PHASES}
    points: list[PathPoint] = []
    fits: list[PointFit] = []
    for name, g in m.groupby(phase_of(m.t_publish, scale)):
        sample = (g.t_confirm - g.t_publish).to_numpy(dtype=float)
        if len(sample) < MIN_SAMPLE or name not in rates:
            continue
        table = quantile_table(sample)
        points.append(
            PathPoint(rate=rates[name], size=SMALL, persistent=True, confirms=True, table=table)
        )
        fits.append(PointFit.held_out(f"confirm/{name}/confirmed", sample))
    return points, fits


SEND_COLUMNS = ("msg_id", "producer", "queue", "t_publish", "t_confirm")


def read_sends(run: Path) -> pd.DataFrame:
    """A calibration run's ``messages`` table, the columns this needs (empty when none)."""
    path = run / "measured" / "messages.parquet"
    if not path.is_file():
        return pd.DataFrame(columns=list(SEND_COLUMNS))
    return pd.read_parquet(path, columns=list(SEND_COLUMNS))
