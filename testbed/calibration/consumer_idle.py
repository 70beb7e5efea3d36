"""The delivery to a consumer by its own idle time (``ClientPath.consumer_idle``, §9a).

A message reaches a consumer that finished its previous message a millisecond before the
publish faster than one that has been idle for a while: its process, its connection's reader
and the broker's dispatch to it are still running. Per idle bin, a calibration's delivery
streams on ActiveMQ took a median 0.33 ms within 2 ms of the consumer's last handler end, 0.46
ms after 10-20 ms and 0.51-0.55 ms after 20-300 ms (RabbitMQ: 0.56, 0.71, 0.75-0.78 ms); the
quickstart's consumers, busy half of the time, took 0.49 ms within 2 ms and 0.84 ms after 20-50
ms, where the simulator drew 0.78 ms for all of them.

Each delivery of the delivery streams is placed by its consumer's idle time before its publish
(``t_publish`` minus that consumer's previous ``t_done``; negative when the consumer was still
busy, which counts as the shortest bin). The streams differ in level (size, persistence, load
phase), so the bins are compared within each stream and phase: log delay = the group's level +
the bin's effect, both estimated by alternating medians (robust to the tail), one curve per
load phase: the effect fades as the machine gets busier (ActiveMQ, wake-up taken out: 0.75 of
the cold delay within 2 ms at 130 msg/s, 0.91 at 438, where nothing on the machine sleeps
long). Every bin from ``IDLE_COLD`` up is one reference bin (factor 1); below it a bin's factor
is exp(its effect − the reference's), made non-decreasing in idle (a shorter idle is never
slower; a dip between bins is noise) and at most 1. A bin with fewer than ``MIN_BIN``
deliveries is left out.

The tables are then stored for a cold consumer: each delivery's delay divided by its bin's
factor (`normalised`), so that the simulator can scale a draw by the consumer's idle time
without counting the calibration's own mix of idle times twice.
"""

from __future__ import annotations

__all__ = ["IDLE_EDGES", "MIN_BIN", "consumer_idle", "idle_points", "normalised"]

import numpy as np
import pandas as pd

from testbed.core.consumer_idle import IDLE_COLD, IdlePoint, idle_curve, idle_factor

IDLE_EDGES = (0.002, 0.005, 0.01, IDLE_COLD)
"""Upper edges of the idle bins (s) below the cold one (everything above ``IDLE_COLD``)."""
MIN_BIN = 30
ROUNDS = 20
"""Alternations of the group-level and bin-effect medians (they settle within a few)."""


def consumer_idle(deliveries: pd.DataFrame) -> pd.Series:
    """Per delivery (index kept), its consumer's idle time before its publish: ``t_publish``
    (``t_deliver - latency_s``) minus the ``t_done`` of that consumer's previous delivery in the
    same replication (NaN for its first)."""
    d = deliveries
    keys = ["consumer"] + (["replication"] if "replication" in d else [])
    order = d.sort_values("t_deliver")
    prev_done = order.groupby(keys, sort=False, observed=True).t_done.shift()
    idle = (order.t_deliver - order.latency_s) - prev_done
    return idle.reindex(d.index)


def _bins(idle: np.ndarray) -> np.ndarray:
    """Bin index of each idle time: 0.. len(IDLE_EDGES)-1 below ``IDLE_COLD``, the last one
    (the cold reference) from it up."""
    return np.searchsorted(np.asarray(IDLE_EDGES), idle, side="left")


def idle_points(
    deliveries: pd.DataFrame, group: pd.Series, rate: pd.Series, delay: pd.Series | None = None
) -> list[IdlePoint]:
    """The ``ClientPath.consumer_idle`` points of the deliveries with a ``group`` label (a
    delivery stream in one load phase; NaN: none) at their phase's total ``rate``, one curve
    per rate, from their ``delay`` (default: ``latency_s``). A rate gets none when its cold
    reference bin or every warmer bin has fewer than ``MIN_BIN`` deliveries."""
    idle = consumer_idle(deliveries)
    delay = deliveries.latency_s if delay is None else delay.reindex(deliveries.index)
    ok = group.notna() & idle.notna() & (delay > 0)
    points: list[IdlePoint] = []
    for r in sorted(rate[ok].unique()):
        at = ok & (rate == r)
        points += _curve(
            float(r), np.log(delay[at].to_numpy(dtype=float)),
            idle[at].to_numpy(dtype=float), pd.factorize(group[at])[0],
        )  # fmt: skip
    return points


def _curve(rate: float, y: np.ndarray, x: np.ndarray, g: np.ndarray) -> list[IdlePoint]:
    """One rate's points from log delays ``y``, consumer idle times ``x`` and group codes
    ``g``: alternating medians of the groups' levels and the bins' effects."""
    b = _bins(x)
    level, effect = np.zeros(g.max() + 1), np.zeros(len(IDLE_EDGES) + 1)
    for _ in range(ROUNDS):
        level = _medians(y - effect[b], g, len(level))
        effect = _medians(y - level[g], b, len(effect))
    counts = np.bincount(b, minlength=len(effect))
    if counts[-1] < MIN_BIN:
        return []
    points: list[IdlePoint] = []
    top = 1.0
    for i in reversed(range(len(IDLE_EDGES))):  # from the coldest warm bin down
        if counts[i] < MIN_BIN:
            continue
        top = min(top, float(np.exp(effect[i] - effect[-1])))
        idle = float(np.median(np.maximum(x[b == i], 0.0)))
        points.append(IdlePoint(rate=rate, idle=round(idle, 6), factor=round(top, 4),
                                n=int(counts[i])))  # fmt: skip
    points.reverse()
    return _distinct(points)


def _medians(v: np.ndarray, key: np.ndarray, n: int) -> np.ndarray:
    """Median of ``v`` per ``key`` in 0..n-1 (0 for a key without values)."""
    return pd.Series(v).groupby(key).median().reindex(range(n)).fillna(0.0).to_numpy()


def _distinct(points: list[IdlePoint]) -> list[IdlePoint]:
    """Drop a point whose median idle equals its predecessor's (two bins of clamped idle)."""
    out: list[IdlePoint] = []
    for p in points:
        if out and p.idle <= out[-1].idle:
            continue
        out.append(p)
    return out


def normalised(
    delay: np.ndarray, idle: np.ndarray, points: list[IdlePoint], rate: float
) -> np.ndarray:
    """``delay`` of deliveries at total ``rate`` whose consumers were idle for ``idle`` (NaN:
    unknown, taken as cold) as it would have been to a cold consumer: divided by the factor
    of the points' curve at that rate."""
    curve = idle_curve(points, rate)
    if not curve:
        return delay
    return delay / idle_factor(curve, np.nan_to_num(idle, nan=IDLE_COLD))  # type: ignore[arg-type]
