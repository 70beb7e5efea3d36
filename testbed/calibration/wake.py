"""The wake-up of an idle machine, from the calibration's sparse stream (`path_scenario.IDLE`).

Each delivery of the sparse stream is placed by the machine's idle time before its publish: the
time since the last instant anything happened in the calibration run — a publish or a handler's
end, of any stream. Its delivery delay is compared with the level of the tables the simulator
adds the wake-up to (`awake_level`): the median delay of the load phases' stream of the same
messages (``BASELINE``) published within ``WAKE_AWAKE`` of such an instant (the machine awake)
to a cold consumer (revision 8). Per idle bin the point is the bin's median idle time and the
excess of its median delay, made non-decreasing (a longer idle never wakes faster; a dip between
bins is noise). A bin with fewer than ``MIN_BIN`` deliveries is merged into the next one.

Revisions 6 and 7 compared with the sparse stream's own deliveries published while the machine
was awake: about ten a run, whose median moved by 0.2-0.4 ms from one calibration to the next
(RabbitMQ, 2026-11-27: 0.55-0.94 ms, where the load phases' level was 0.70-0.88 ms from ~100
deliveries), and a wake-up measured above a high one was added to tables at the lower level.
Given one calibration's records both ways, the SPECjms2007 interaction 3 run that followed it on
the same broker was predicted with a KS distance of 0.179 against its own base and 0.137
against the tables' (with the fan delay, `testbed.calibration.fan_out`, in both)."""

from __future__ import annotations

__all__ = [
    "IDLE_EDGES",
    "MIN_BIN",
    "awake",
    "awake_level",
    "idle_before",
    "machine_idle",
    "wake_points",
]

import numpy as np
import pandas as pd

from testbed.calibration.consumer_idle import consumer_idle
from testbed.calibration.path_scenario import phase_of
from testbed.calibration.path_streams import IDLE
from testbed.core.client_path import WAKE_AWAKE, WakePoint, wake_delay
from testbed.core.consumer_idle import IDLE_COLD

IDLE_EDGES = (WAKE_AWAKE, 0.02, 0.05, 0.1, 0.2, float("inf"))
"""Upper edges of the idle bins (s) above the awake one."""
MIN_BIN = 10
SAME_INSTANT = 1e-6
"""Instants closer than this (s) are one: a message's copies share their publish."""
BASELINE = "small"
"""The load phases' stream of the sparse stream's kind of message (200 B, transient, no
confirm, from a timer-driven producer)."""
FLOOR = 0.25
"""The least share of a delay `awake` keeps (a delay below its bin's median extra is rare)."""


def machine_idle(deliveries: pd.DataFrame) -> pd.Series:
    """Per acked delivery with a latency (index kept), the machine's idle time before its
    publish: since the latest earlier publish or handler end of any queue in ``deliveries``."""
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()]
    published = (d.t_deliver - d.latency_s).to_numpy(dtype=float)
    ended = d.t_done.dropna().to_numpy(dtype=float)
    instants = np.sort(np.concatenate([published, ended]))
    # instants strictly earlier, by more than SAME_INSTANT: a fanned-out message's copies each
    # give its publish time as t_deliver - latency_s, a nanosecond apart from each other
    before = np.searchsorted(instants, published - SAME_INSTANT, side="left")
    last = np.where(before > 0, instants[np.maximum(before - 1, 0)], np.nan)
    return pd.Series(published - last, index=d.index)


def idle_before(deliveries: pd.DataFrame, queue: str) -> pd.DataFrame:
    """The acked deliveries of ``queue`` with their publish time (``t_publish``) and the
    machine's idle time before it (``idle``, `machine_idle`)."""
    idle = machine_idle(deliveries)
    d = deliveries.loc[idle.index]
    own = d.assign(t_publish=d.t_deliver - d.latency_s, idle=idle)[d.queue.astype(str) == queue]
    return own.dropna(subset=["idle"])


def awake(deliveries: pd.DataFrame, points: list[WakePoint]) -> pd.Series:
    """Per acked delivery with a latency, its delay less the wake-up of the machine's idle time
    before its publish (``points``): what it would have taken on an awake machine. The load
    phases leave the machine idle for more than ``WAKE_AWAKE`` before a quarter of their
    publishes at 130 msg/s (ActiveMQ, 2026-11-27: those took a median 0.95 ms, the rest
    0.5-0.7), and the simulator adds the wake-up after such idle time itself: kept in the tables
    it was counted twice. A delay is kept at ``FLOOR`` of itself at least."""
    idle = machine_idle(deliveries)
    delay = deliveries.latency_s[idle.index].to_numpy(dtype=float)
    extra = np.array([wake_delay(points, float(i)) if i == i else 0.0 for i in idle])
    return pd.Series(np.maximum(delay - extra, FLOOR * delay), index=idle.index)


def awake_level(deliveries: pd.DataFrame, scale: float = 1.0) -> float | None:
    """The median delay of the load phases' ``BASELINE`` stream published while the machine was
    awake, to a cold consumer: the level of the delivery tables a wake-up is added to (None:
    fewer than ``MIN_BIN`` such deliveries)."""
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()]
    own = d[
        (d.queue.astype(str) == f"mqbed-cal-{BASELINE}")
        & phase_of(d.t_deliver - d.latency_s, scale).notna()
    ]
    if len(own) < MIN_BIN:
        return None
    keep = (machine_idle(d)[own.index] <= WAKE_AWAKE) & (consumer_idle(own) > IDLE_COLD)
    if int(keep.sum()) < MIN_BIN:
        return None
    return float(np.median(own.latency_s[keep]))


def wake_points(deliveries: pd.DataFrame, scale: float = 1.0) -> list[WakePoint]:
    """The ``ClientPath.wake`` points of one calibration run (empty: too few deliveries of the
    sparse stream published while the machine was awake, or none after idle time)."""
    d = idle_before(deliveries, f"mqbed-cal-{IDLE}")
    idle = d.idle.to_numpy(dtype=float)
    delay = d.latency_s.to_numpy(dtype=float)
    awake = delay[idle <= WAKE_AWAKE]
    if len(awake) < MIN_BIN:
        return []
    level = awake_level(deliveries, scale)
    base = level if level is not None else float(np.median(awake))
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
