"""The wake-up of an idle machine, from the calibration's sparse stream (`path_scenario.IDLE`).

Each delivery of the sparse stream is placed by the machine's idle time before its publish: the
time since the last instant anything happened in the calibration run — a publish or a handler's
end, of any stream. Its delivery delay is compared with the median of the deliveries published
within ``WAKE_AWAKE`` of such an instant (the machine awake); per idle bin the point is the bin's
median idle time and the excess of its median delay, made non-decreasing (a longer idle never
wakes faster; a dip between bins is noise). A bin with fewer than ``MIN_BIN`` deliveries is
merged into the next one.
"""

from __future__ import annotations

__all__ = ["IDLE_EDGES", "MIN_BIN", "wake_points"]

import numpy as np
import pandas as pd

from testbed.calibration.path_scenario import IDLE
from testbed.core.client_path import WAKE_AWAKE, WakePoint

IDLE_EDGES = (WAKE_AWAKE, 0.02, 0.05, 0.1, 0.2, float("inf"))
"""Upper edges of the idle bins (s) above the awake one."""
MIN_BIN = 10


def idle_before(deliveries: pd.DataFrame, queue: str) -> pd.DataFrame:
    """The acked deliveries of ``queue`` with their publish time (``t_publish``) and the
    machine's idle time before it (``idle``: since the latest earlier publish or handler end of
    any queue in ``deliveries``)."""
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()]
    published = (d.t_deliver - d.latency_s).to_numpy(dtype=float)
    ended = d.t_done.dropna().to_numpy(dtype=float)
    instants = np.sort(np.concatenate([published, ended]))
    own = d.assign(t_publish=published)[d.queue.astype(str) == queue]
    t = own.t_publish.to_numpy(dtype=float)
    before = np.searchsorted(instants, t, side="left")  # instants strictly earlier
    last = np.where(before > 0, instants[np.maximum(before - 1, 0)], np.nan)
    return own.assign(idle=t - last).dropna(subset=["idle"])


def wake_points(deliveries: pd.DataFrame) -> list[WakePoint]:
    """The ``ClientPath.wake`` points of one calibration run (empty: too few deliveries of the
    sparse stream published while the machine was awake, or none after idle time)."""
    d = idle_before(deliveries, f"mqbed-cal-{IDLE}")
    idle = d.idle.to_numpy(dtype=float)
    delay = d.latency_s.to_numpy(dtype=float)
    awake = delay[idle <= WAKE_AWAKE]
    if len(awake) < MIN_BIN:
        return []
    base = float(np.median(awake))
    points: list[WakePoint] = []
    low, top = WAKE_AWAKE, 0.0
    for high in IDLE_EDGES[1:]:
        inside = (idle > low) & (idle <= high)
        n = int(inside.sum())
        if n < MIN_BIN:
            continue  # merged into the next bin (the last one: left out)
        top = max(top, float(np.median(delay[inside])) - base)
        idle_s = round(float(np.median(idle[inside])), 6)
        points.append(WakePoint(idle=idle_s, extra=round(top, 7), n=n))
        low = high
    return points
