"""What a fan-out costs on the client path, from the calibration's fan stream (`path_scenario.FAN`).

Two figures, both from the low phase, where one producer publishes 4 msg/s to a fanout exchange
bound to ``FAN_WIDTH`` queues whose consumers share the Locust process:

- ``copy_gap``: the median gap between the handler starts of one message's consecutive copies —
  the work a delivery costs its process before its handler (``ClientPath.copy_gap``);
- ``fan_delay``: how much later a fanned-out message's *first* copy starts than a message to one
  queue, per extra queue (``ClientPath.fan_delay``). The broker routes the message to every
  bound queue before the copies reach their consumers (RabbitMQ's channel hands it to each
  queue process, ActiveMQ dispatches it to each subscription), so all copies start that much
  later. Measured on SPECjms2007 interaction 3 (a price update to five queues, 2026-11-27), the
  first copy of a message published while the machine was awake took a median 1.04 ms on
  RabbitMQ where the simulator, which drew it from the one-queue table, gave 0.74 ms (ActiveMQ
  0.93 vs 0.80 ms), at every idle time alike; the calibration's own fan stream showed the same
  against its one-queue stream of the same messages (RabbitMQ 0.95 vs 0.74-0.77 ms).

The comparison keeps the deliveries published while the machine was awake (idle at most
``WAKE_AWAKE``: the wake-up is added separately) to a cold consumer (idle over ``IDLE_COLD``:
the delivery tables are stored for one), and compares the medians of the fan stream's first
copies and of the small stream's deliveries (200-byte transient messages from a producer that
does not wait for confirms, as the fan stream's): their difference, divided by the extra queues
``FAN_WIDTH - 1`` and never negative, is the delay per extra queue. Hand-written because it is a
comparison of two medians over this scenario's own streams, not a statistic a library offers.
"""

from __future__ import annotations

__all__ = ["MIN_FIRST", "copy_gap", "fan_delay"]

import numpy as np
import pandas as pd

from testbed.calibration.confirm_path import MIN_SAMPLE
from testbed.calibration.consumer_idle import consumer_idle
from testbed.calibration.path_scenario import PHASES, phase_of
from testbed.calibration.path_streams import FAN, FAN_WIDTH
from testbed.calibration.wake import machine_idle
from testbed.core.client_path import WAKE_AWAKE
from testbed.core.consumer_idle import IDLE_COLD

MIN_FIRST = 20
"""Fewest awake, cold deliveries on each side of the fan delay's comparison."""
SINGLE = "small"
"""The one-queue stream the fan stream's first copies are compared with."""


def _fan(deliveries: pd.DataFrame) -> pd.DataFrame:
    """The fan stream's first deliveries (acked)."""
    d = deliveries
    keep = (d.outcome == "acked") & d.queue.astype(str).str.startswith(f"mqbed-cal-{FAN}-")
    if "attempt" in d:
        keep &= d.attempt == 1
    return d[keep]


def copy_gap(deliveries: pd.DataFrame) -> float | None:
    """Median gap (s) between the handler starts of consecutive copies of one message of the
    fan-out stream; None with fewer than ``MIN_SAMPLE`` gaps."""
    d = _fan(deliveries)
    if d.empty:
        return None
    starts = d.sort_values(["msg_id", "t_deliver"])
    gaps = starts.groupby("msg_id").t_deliver.diff().dropna().to_numpy(dtype=float)
    if len(gaps) < MIN_SAMPLE:
        return None
    return round(float(np.median(np.maximum(gaps, 0.0))), 7)


def fan_delay(deliveries: pd.DataFrame, scale: float = 1.0) -> float | None:
    """The delay (s) a fanned-out message's copies take per extra queue (see the module
    docstring); None with fewer than ``MIN_FIRST`` deliveries on either side."""
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()]
    if d.empty:
        return None
    d = d.assign(machine=machine_idle(d), consumer=consumer_idle(d))
    fanned = [ph.name for ph in PHASES if ph.fan]
    keep = (
        phase_of(d.t_deliver - d.latency_s, scale).isin(fanned)
        & (d.machine <= WAKE_AWAKE)
        & (d.consumer > IDLE_COLD)
    )
    fan = _fan(d)
    first = fan[fan.t_deliver == fan.groupby("msg_id").t_deliver.transform("min")]
    first = first[keep[first.index]]
    single = d[keep & (d.queue.astype(str) == f"mqbed-cal-{SINGLE}")]
    if len(first) < MIN_FIRST or len(single) < MIN_FIRST:
        return None
    extra = float(np.median(first.latency_s)) - float(np.median(single.latency_s))
    return round(max(extra, 0.0) / (FAN_WIDTH - 1), 7)
