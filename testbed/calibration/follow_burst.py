"""A handler's burst of follow-ups, from the calibration's burst stream (`path_scenario.BURST`).

The burst stream's consumer publishes ``BURST_WIDTH`` follow-ups from each handler, one to each
of ``BURST_WIDTH`` queues whose consumers share the Locust process. ``follow_gap`` is the median
gap between the publish stamps of one handler's consecutive follow-ups: a publish's wall time
inside a handler, which the publish CPU span (``ClientPath.cpu.publish``) does not hold — the
broker works on the frames just sent on the same two cores meanwhile (SPECjms2007 interaction 1,
2026-11-29: stamps 0.13-0.19 ms apart on ActiveMQ, publish CPU 0.06 ms; 0.43-0.45 ms on
RabbitMQ, publish CPU 0.13 ms; the calibration's burst gave 0.13 and 0.41 ms).

How far apart the burst's handlers start was measured too and left out: on ActiveMQ the
calibration's transient burst started 0.04 ms apart where interaction 1's persistent ones
started 0.12-0.2 ms apart, and on RabbitMQ booking the calibration's 0.46 ms before each
member's handler put the interaction's ShipDep and StatInfo 50-80 % late.

Hand-written because it is a gap within this scenario's own groups of records, not a statistic
a library offers.
"""

from __future__ import annotations

__all__ = ["follow_gap"]

import numpy as np
import pandas as pd

from testbed.calibration.confirm_path import MIN_SAMPLE
from testbed.calibration.path_streams import BURST, BURST_WIDTH

MAX_SPAN = 0.05
"""A burst whose follow-ups' stamps spread wider than this (s) is not one handler's burst."""


def _bursts(sends: pd.DataFrame) -> pd.DataFrame:
    """The burst stream's follow-ups, with their burst's number (``burst``) and place in it,
    whole bursts only (every member sent, in queue order, within ``MAX_SPAN``)."""
    q = sends.queue.astype(str)
    inside = q.str.startswith(f"mqbed-cal-{BURST}-")
    f = sends[inside].copy()
    if f.empty:
        return f.assign(burst=pd.Series(dtype=object), member=pd.Series(dtype=int))
    seq = f.msg_id.astype(str).str.extract(r"\.f(\d+)$")[0].astype(float)
    f["member"] = q[inside].str.rsplit("-", n=1).str[-1].astype(int)
    f["burst"] = f.producer.astype(str) + "/" + (seq // BURST_WIDTH).astype("Int64").astype(str)
    f = f[seq.notna() & f.t_publish.notna()].sort_values(["burst", "member"])
    g = f.groupby("burst")
    whole = (g.member.transform("count") == BURST_WIDTH) & (
        g.t_publish.transform(lambda t: t.max() - t.min()) <= MAX_SPAN
    )
    in_order = g.t_publish.transform(lambda t: bool(np.all(np.diff(t.to_numpy()) >= 0)))
    return f[whole & in_order.astype(bool)]


def follow_gap(sends: pd.DataFrame) -> float | None:
    """Median gap (s) between the publish stamps of one handler's consecutive follow-ups; None
    with fewer than ``MIN_SAMPLE`` gaps (or a run without the burst stream)."""
    gaps = _bursts(sends).groupby("burst").t_publish.diff().dropna()  # in order: _bursts
    if len(gaps) < MIN_SAMPLE:
        return None
    return round(float(gaps.median()), 7)
