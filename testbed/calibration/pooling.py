"""Pooling the machine's recent client-path calibrations (``--calibration fresh``).

One calibration is one draw of the machine's state: each delivery table rests on one 12 s load
phase, and a slow spell of a few seconds moves it whole. Measured on one ActiveMQ machine within
one hour (2026-11-28, three fresh calibrations minutes apart, no foreign load): the 130 msg/s
tables' medians were 1.19-1.54 ms in two of them and 1.66-2.25 ms in the third, whose own
438 msg/s point sat below its 130 msg/s one. The visibility-timeout run predicted with that
third profile missed its median by +99 % (KS 0.342); with either of the other two by +25 % and
+34 %.

So a fresh calibration is pooled with the previous draws of the same host, broker version,
client library and calibration revision taken within ``WINDOW_S``, up to ``POOL`` in all: every
quantile table by the *median* of its quantiles across the draws (Vincent pooling: the quantile
functions are combined point by point, so each pooled table is still non-decreasing and keeps
the common shape), every fitted scalar by its median; the fault proxy's hop is pooled over the
draws that measured one. With three draws one slow draw is voted out rather than averaged in.
The same three ActiveMQ runs predicted with the pool of those three calibrations: 9, 8 and 7
of 10 within target (their own calibrations: 7, 8 and 7), latency KS 0.087, 0.159 and 0.150
(0.120, 0.342 and 0.229).

An earlier draw pools only if it was quiet: other work used at most ``POOL_FOREIGN_LIMIT`` cores
while it was measured. The calibration itself keeps an attempt up to ``FOREIGN_CPU_LIMIT`` (0.5)
cores, so that a busy machine still gets a profile, but a draw known to carry foreign load is a
known slow draw, and two of them outvote the quiet one they are pooled with. Measured on one
ActiveMQ machine (2026-11-28): twelve draws with 0.013-0.037 cores of foreign load had 130 msg/s
small-message tables with p90 1.4-9.1 ms, five taken while the host was contended (0.136-0.271
cores, the hypervisor stealing CPU time) 15-32 ms; the SPECjms2007 interaction 3 case pooled its
fresh, quiet draw with two of those five three hours later and was predicted at p95 +191 % (KS
0.60).

What is not a table or a scalar — the wake-up points (binned by each draw's own idle times), the
consumer-idle factors, goodness of fit, provenance — is the newest draw's. The draws are kept
as ``<cache stem>.draws/<UTC stamp>.yaml``; ``Provenance.pooled`` lists the dates pooled.
"""

from __future__ import annotations

__all__ = [
    "POOL",
    "POOL_FOREIGN_LIMIT",
    "WINDOW_S",
    "has_draws",
    "pool_client_paths",
    "pooled_with_recent",
    "record_draw",
]

import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from testbed.core.atomic import atomic_write_text
from testbed.core.client_path import ClientPath, Provenance
from testbed.core.quantiles import QuantileTable

POOL = 3
"""Draws pooled at most (the new one included): the least that outvotes one bad draw."""
POOL_FOREIGN_LIMIT = 0.1
"""Cores of foreign load (`Provenance.foreign_cores`) above which an earlier draw does not pool:
between the quiet draws' 0.04 and the contended ones' 0.136 in the module docstring's figures.
A draw that did not record its foreign load does not pool either."""
WINDOW_S = 6 * 3600.0
"""How old a previous draw may be (s): the machine changes speed over hours, too."""
_TABLES = ("delivery", "hold", "confirm", "turnaround")
_SCALARS = ("copy_gap", "fan_delay", "follow_gap", "cpu_per_op")
_CPU = ("publish", "receive", "ack")


def _key(point: Any) -> tuple[Any, ...]:
    """What a table point is measured at (everything but its table)."""
    return tuple(v for k, v in point.model_dump().items() if k != "table")


def _median_table(tables: Sequence[QuantileTable]) -> QuantileTable:
    q = np.median(np.array([t.q for t in tables]), axis=0)
    return QuantileTable(n=sum(t.n for t in tables), q=[float(x) for x in q])


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def pool_client_paths(draws: Sequence[ClientPath]) -> ClientPath:
    """The draws (oldest first, the newest last) pooled as the module docstring says."""
    newest = draws[-1]
    if len(draws) == 1:
        return newest
    update: dict[str, Any] = {}
    for name in _TABLES:
        points = []
        for point in getattr(newest, name):
            same = [p.table for d in draws for p in getattr(d, name) if _key(p) == _key(point)]
            points.append(point.model_copy(update={"table": _median_table(same)}))
        update[name] = points
    hops = [d.proxy_hop for d in draws if d.proxy_hop is not None]
    if hops:
        update["proxy_hop"] = _median_table(hops)
    for name in _SCALARS:
        update[name] = _median([getattr(d, name) for d in draws])
    splits = [d.cpu for d in draws if d.cpu is not None]
    if newest.cpu is not None and len(splits) == len(draws):
        cpu: dict[str, float | None] = {
            k: statistics.median(getattr(c, k) for c in splits) for k in _CPU
        }
        cpu["publish_rest"] = _median([c.publish_rest for c in splits])
        update["cpu"] = newest.cpu.model_copy(update=cpu)
    pooled = [d.provenance.date for d in draws]
    update["provenance"] = newest.provenance.model_copy(update={"pooled": pooled})
    return newest.model_copy(update=update)


def _split(cp: ClientPath) -> bool:
    """Whether a draw's CPU outside the spans was split between publishes and deliveries
    (`CpuSplit.publish_rest`): a draw's ``receive`` means something else when it was not, and
    the two do not pool."""
    return cp.cpu is not None and cp.cpu.publish_rest is not None


def _draws_dir(cache: Path) -> Path:
    return cache.with_name(cache.stem + ".draws")


def _age_s(cp: ClientPath, now: datetime) -> float | None:
    try:
        when = datetime.fromisoformat(cp.provenance.date)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (now - when).total_seconds()


def has_draws(cache: Path) -> bool:
    """Whether any draw is kept beside `cache`."""
    folder = _draws_dir(cache)
    return folder.is_dir() and any(folder.glob("*.yaml"))


def record_draw(cache: Path, cp: ClientPath) -> Path:
    """Keep one calibration's own client path (not a pooled one) beside the cached profile."""
    folder = _draws_dir(cache)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = folder / f"{stamp}.yaml"
    own = cp.model_copy(update={"provenance": cp.provenance.model_copy(update={"pooled": []})})
    atomic_write_text(path, yaml.safe_dump(own.model_dump(mode="json"), sort_keys=False))
    return path


def _quiet(p: Provenance) -> bool:
    """Whether a draw was measured with little enough foreign load to pool."""
    cores = p.foreign_cores
    return not p.taken_busy and cores is not None and cores <= POOL_FOREIGN_LIMIT


def _recent(cache: Path, new: ClientPath, now: datetime) -> list[ClientPath]:
    """Earlier draws that may pool with `new`, oldest first (unreadable ones are skipped)."""
    found: list[ClientPath] = []
    folder = _draws_dir(cache)
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            cp = ClientPath.model_validate(yaml.safe_load(path.read_text()))
        except (OSError, ValueError, yaml.YAMLError):
            continue  # a draw of an older revision's shape, or a torn file: not poolable
        age = _age_s(cp, now)
        p, q = cp.provenance, new.provenance
        if (
            age is not None and 0 <= age <= WINDOW_S and cp.protocol == new.protocol
            and cp.client == new.client and p.broker_version == q.broker_version
            and p.hostname == q.hostname and _quiet(p) and _split(cp) == _split(new)
        ):  # fmt: skip
            found.append(cp)
    return found[-(POOL - 1) :]


def pooled_with_recent(cache: Path, new: ClientPath) -> ClientPath:
    """`new` recorded as a draw, and returned pooled with the recent earlier ones."""
    earlier = _recent(cache, new, datetime.now(UTC))
    record_draw(cache, new)
    return pool_client_paths([*earlier, new])
