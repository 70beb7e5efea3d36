"""Broker restart times a live run observed, pooled into this machine's cached profile.

The calibration times two kills (`testbed.calibration.restart`); a run with broker kills times
every one of its own the same way (the ``heal_s`` of each kill's ``fault_end`` row: from the
restart call to healthy). One machine's kills vary widely — RabbitMQ healed in 7.1-15.7 s over
one QoS pair's 32 kills (mean 10.6 s, 2026-12-03) where the two calibration kills just before
took 9.4 and 7.7 s, so the prediction had the broker down 26.3 % of the time against 38.7 %
measured. After a run whose prediction came from this machine's cached profile (``auto`` or
``fresh``), its kills join the profile's ``restart_time``: a pooled mean and sd in which the
older samples weigh at most ``POOL_LIMIT`` minus the new ones, so the figure follows the
machine. The next run's prediction uses it; a run's own prediction never does (it was made
before the load).
"""

from __future__ import annotations

__all__ = ["POOL_LIMIT", "learn_restart_time", "observed_heals", "pooled_restart"]

import json
import logging
import math
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from rich.console import Console

from testbed.calibration.machine import ProfileChoice, write_profile
from testbed.core.faultplan import is_broker_target
from testbed.core.profile import RestartTime, load_profile

log = logging.getLogger(__name__)

POOL_LIMIT = 64
"""Most samples the pooled restart time stands for: the newest weigh, the oldest fade."""


def observed_heals(events: pd.DataFrame) -> list[float]:
    """The restart times (s) of the broker kills in a run side's ``events``: each kill's
    ``fault_end`` ``heal_s`` (a scenario ``broker_kill`` or a stochastic one in ``kill``
    mode), except the ones the run's end cut short (``rolled_back``, ``clipped``)."""
    out: list[float] = []
    ends = events[events.kind == "fault_end"]
    for target, raw in zip(ends.target, ends.detail, strict=True):
        if not is_broker_target(str(target), None):
            continue
        d = json.loads(raw or "{}")
        kill = d.get("kind") == "broker_kill" or (
            d.get("kind") == "stochastic" and (d.get("params") or {}).get("mode") == "kill"
        )
        if kill and d.get("heal_s") is not None and not (d.get("rolled_back") or d.get("clipped")):
            out.append(float(d["heal_s"]))
    return out


def pooled_restart(known: RestartTime, heals: Sequence[float], date: str) -> RestartTime:
    """`known` with `heals` pooled in (mean and sd of the union, the law of total variance);
    the old samples weigh ``min(known.samples, POOL_LIMIT - len(heals))``, at least none."""
    if not heals:
        return known
    n_new = len(heals)
    m_new = statistics.fmean(heals)
    v_new = statistics.pvariance(heals, m_new)
    n_old = max(0, min(known.samples, POOL_LIMIT - n_new))
    n = n_old + n_new
    mean = (n_old * known.mean + n_new * m_new) / n
    var = n_old * (known.sd**2 + (known.mean - mean) ** 2) + n_new * (v_new + (m_new - mean) ** 2)
    return known.model_copy(
        update={"mean": mean, "sd": math.sqrt(var / n), "samples": n, "date": date}
    )


def learn_restart_time(
    choice: ProfileChoice, measured: Path, calibration: str, console: Console
) -> None:
    """Pool the kills of a finished run (its ``measured`` folder) into this machine's cached
    profile the run's prediction came from; nothing for an explicit or shipped profile, in
    ``cached`` or ``shipped`` mode, or for a profile without a measured restart time (the next
    ``auto`` run measures one)."""
    if calibration not in ("auto", "fresh") or choice.origin not in ("cached", "calibrated"):
        return
    try:
        heals = observed_heals(pd.read_parquet(measured / "events.parquet"))
        if not heals:  # no broker kill: nothing to read or write
            return
        cached = load_profile(choice.path)  # as cached, not as the run adjusted it
        known = cached.restart_time
        if known is None:
            return
        date = datetime.now(UTC).isoformat(timespec="seconds")
        updated = pooled_restart(known, heals, date)
        write_profile(cached.model_copy(update={"restart_time": updated}), choice.path, None)
    except Exception as e:  # noqa: BLE001 - the run's data is written; only the cache is not
        log.warning("pooling the run's restart times into %s failed", choice.path, exc_info=True)
        console.print(f"broker restart times not pooled into the cached profile: {e}", markup=False)
        return
    console.print(
        f"broker restart time {known.mean:.1f} s ({known.samples} samples) -> {updated.mean:.1f}"
        f" s with this run's {len(heals)} kills (mean {statistics.fmean(heals):.1f} s); cached"
        f" in {choice.path}",
        markup=False,
    )
