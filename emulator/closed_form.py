"""The analytic prediction: a scenario mapped onto the closed forms of ``emulator.analytic``.

Used by ``predict(method="analytic")``. Supported shapes, each exact under its assumptions
(docs/models.md §3–§5) — anything else raises ``PredictionError`` naming the first assumption that
fails, never a silent approximation of another model:

- **closed writers on a shared lock** (``shared_lock``, closed producers, no consumer): exact MVA
  with demand D = the lock's write time and think time Z + 2d (+ persistence) (§3b, §5).
- **one queue, open Poisson load** (``amqp`` or ``threads``): Poisson producers publish to one
  queue read by consumers with one service law. Stations in series:
  - ``threads``: the receive stage M/M/N1 at λ and the dispatch stage M/M/N2 at λ/p — the §4
    Jackson tandem T = W1 + 2d + W2/p + ((1 − p)/p)·VT;
  - ``amqp``: a fixed path d + s_q + δ + d (the calibrated latency) + ((1 − p)/p)·VT;
  - the consumers: with exponential service and prefetch 1, an M/M/N station (M/M/1/K with
    ``max_length``, K = max_length + 1) whose server holding time is delivery d + δ, service,
    read overhead and the ack's d; exact when those extras are zero, otherwise the wait is
    scaled by the Allen–Cunneen factor (1 + c²)/2 of the holding time; consumers with zero
    service time are sinks (no station) — the only case where retries (p < 1) are allowed,
    since a failed attempt holds prefetch credit until its lease expires.
Latency figures are publish → handler start, as in the simulator's records. With a measured
client path in the profile the fixed path is its delivery table (its mean in the mean, its
quantiles in the percentiles) and the read overhead is the measured hold; percentiles are given
only where a distribution is known — never the mean copied into p50/p95/p99. Queue depth
leaves out copies waiting out a visibility timeout, as the live side counts it.
"""

from __future__ import annotations

__all__ = ["analytic_figures"]

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from emulator import analytic
from emulator.errors import PredictionError
from emulator.sim.costs import Costs, derive_costs
from emulator.sim.summary import Key
from testbed.core.profile import Profile
from testbed.core.quantiles import PROBS, QuantileTable
from testbed.core.scenario import ClosedArrival, ConsumerSpec, PoissonArrival, Scenario
from testbed.core.threads import stage_counts
from testbed.core.visibility import dead_letter_probability, holds_head_of_line


def _refuse(assumption: str, why: str) -> PredictionError:
    return PredictionError(
        f"analytic method: assumption '{assumption}' fails: {why}; use --method simulate",
        assumption,
    )


def _require(ok: bool, assumption: str, why: str) -> None:
    if not ok:
        raise _refuse(assumption, why)


def _exponential(dist: Any) -> bool:
    return abs(float(dist.cv) - 1.0) <= 1e-9


def analytic_figures(s: Scenario, profile: Profile) -> dict[Key, float]:
    """Steady-state figures keyed like the simulator's summary (metric, queue, flow)."""
    _require(not s.faults, "no faults", f"the scenario injects {len(s.faults)} fault(s)")
    _require(not s.autoscaling, "no autoscaling", "the scenario scales consumers")
    _require(not s.topology.load_balanced, "no load-balanced aliases", "elastic aliases are used")
    for c in s.consumers:
        _require(not c.follow_ups, "no message chains", f"consumer group {c.name!r} has follow_ups")
    for p in s.producers:
        _require(
            p.start == 0 and p.stop is None and p.max_messages is None,
            "stationary load",
            f"producer {p.name!r} has start/stop/max_messages",
        )
    kind = s.broker.model or "amqp"
    threads = s.broker.threads
    costs = derive_costs(profile, kind, threads, float(s.broker.memory_limit))
    try:
        if kind == "shared_lock":
            return _closed_writers(s, costs)
        return _open_queue(s, costs, kind)
    except ValueError as e:  # unstable stations
        raise _refuse("stability", str(e)) from e


def _closed_writers(s: Scenario, c: Costs) -> dict[Key, float]:
    closed = [p for p in s.producers if isinstance(p.arrival, ClosedArrival)]
    _require(
        len(closed) == len(s.producers),
        "closed writers",
        "the shared_lock closed form covers closed-loop producers only",
    )
    _require(
        not any(g.count for g in s.consumers),
        "no readers",
        "readers share the lock with writers; the MVA form covers writers only",
    )
    thinks = {float(p.arrival.think_time.mean) for p in closed}  # type: ignore[union-attr]
    _require(len(thinks) == 1, "identical producers", f"think times differ: {sorted(thinks)}")
    persist = 0.0
    if any(p.persistent for p in closed):
        _require(all(p.persistent for p in closed), "identical producers", "mixed persistence")
        size = float(closed[0].size.mean)
        persist = c.persist_a + c.persist_b * size
    n = sum(p.count for p in closed)
    demand = float(c.lock_write.mean)
    res = analytic.mva_closed(n, thinks.pop() + 2 * c.d + persist, demand)
    return {
        ("publish_rate_msg_s", None, None): res.x,
        ("confirm_mean_s", None, None): res.r + 2 * c.d + persist,
    }


def _open_queue(s: Scenario, c: Costs, kind: str) -> dict[Key, float]:
    lam, size, qname, confirms = _offered_traffic(s)
    spec = s.queue(qname)
    _require(
        not holds_head_of_line(spec.visibility if spec is not None else None),
        "out-of-order delivery",
        f"queue {qname!r} is in order: one delivery at a time, a failed one holds the line",
    )
    groups, svc, fail = _service_law(s, qname)
    sink = svc == 0.0
    p = 1.0 - fail
    vt = 0.0
    if fail > 0:
        vis = spec.visibility if spec is not None else None
        _require(vis is not None, "visibility timeout", f"queue {qname!r} fails without one")
        _require(sink, "retries only with sink consumers", "failed attempts hold prefetch credit")
        vt = float(vis.timeout)  # type: ignore[union-attr]
    n = sum(g.count for g in groups)
    prefetch1 = all(g.prefetch == 1 for g in groups)
    path = _fixed_path(c, kind, lam, size, p, vt, confirms=confirms, prefetch1=prefetch1)
    rate = lam
    pq: tuple[float, float, float] | None = None
    if sink:
        latency = path.to_consumer
        # copies waiting out a visibility timeout are not in the queue's depth (as measured)
        depth = lam * (path.broker_wait + 2 * c.d + path.delta + path.pre + path.read)
        if path.table is not None:  # the path's own quantiles, shifted by the constant stages
            shift = path.to_consumer - path.table.mean
            pq = tuple(shift + path.table.quantile(q) for q in (0.5, 0.95, 0.99))  # type: ignore[assignment]
    else:
        max_length = spec.max_length if spec is not None else None
        rate, wq, depth, pq = _consumer_station(c, kind, lam, svc, n, qname, max_length, path)
        latency = path.to_consumer + wq
    if spec is not None and spec.visibility is not None and fail > 0:
        rate *= 1.0 - dead_letter_probability(fail, spec.visibility.max_deliveries)
    out: dict[Key, float] = {}
    out[("throughput_msg_s", None, None)] = rate
    out[("latency_mean_s", None, None)] = latency
    out[("end_to_end_mean_s", None, None)] = latency + svc + path.read
    out[("queue_depth_mean", None, None)] = depth
    out[("queue_depth_mean", qname, None)] = depth
    out[("publish_rate_msg_s", None, None)] = lam
    if pq is not None:
        for name, v in zip(("latency_p50_s", "latency_p95_s", "latency_p99_s"), pq, strict=True):
            out[(name, None, None)] = v
    return out


def _offered_traffic(s: Scenario) -> tuple[float, float, str, bool]:
    """The Poisson producers' total rate λ, rate-weighted mean size, the one queue their
    traffic reaches and whether they use confirms (all or none)."""
    lam = 0.0
    size_sum = 0.0
    targets: set[str] = set()
    confirms = set()
    for prod in s.producers:
        _require(
            isinstance(prod.arrival, PoissonArrival),
            "poisson arrivals",
            f"producer {prod.name!r} has arrival kind {prod.arrival.kind!r}",
        )
        rate = float(prod.arrival.rate) * prod.count  # type: ignore[union-attr]
        lam += rate
        size_sum += rate * float(prod.size.mean)
        confirms.add(prod.confirms)
        if prod.queue is not None:
            targets.add(prod.queue)
        else:
            keys = prod.routing_key if isinstance(prod.routing_key, list) else [prod.routing_key]
            for key in keys:
                routed = s.routed_queues(prod.exchange or "", key)
                _require(
                    len(routed) == 1, "one queue", f"producer {prod.name!r} fans out to {routed}"
                )
                targets.update(routed)
    _require(len(targets) == 1, "one queue", f"traffic reaches {sorted(targets)}")
    _require(len(confirms) == 1, "identical producers", "some producers use confirms, some not")
    size = size_sum / lam if lam > 0 else 0.0
    return lam, size, targets.pop(), confirms.pop()


def _service_law(s: Scenario, qname: str) -> tuple[list[ConsumerSpec], float, float]:
    """The consumer groups reading ``qname`` and their one service law: mean service time and
    failure probability (acks after processing; exponential and prefetch 1 unless sinks)."""
    groups = [g for g in s.consumers if g.queue == qname and g.count > 0]
    _require(bool(groups), "consumers", f"no consumer reads queue {qname!r}")
    means = {float(g.service_time.mean) for g in groups}
    fails = {g.failure_probability for g in groups}
    _require(len(means) == 1, "one service law", f"service means differ: {sorted(means)}")
    _require(len(fails) == 1, "one service law", f"failure probabilities differ: {sorted(fails)}")
    svc, fail = means.pop(), fails.pop()
    sink = svc == 0.0
    for g in groups:
        _require(g.ack == "after_processing", "ack after processing", f"{g.name!r} acks {g.ack!r}")
        if not sink:
            _require(
                _exponential(g.service_time),
                "exponential service",
                f"{g.name!r} service cv = {float(g.service_time.cv):.3g}",
            )
            _require(g.prefetch == 1, "prefetch 1", f"{g.name!r} has prefetch {g.prefetch}")
    return groups, svc, fail


@dataclass(frozen=True)
class _Path:
    """Publish → delivery to the consumer, before any wait for a consumer."""

    to_consumer: float
    broker_wait: float
    """Time in the broker's stations counted in the queue's depth (``threads``), else 0."""
    delta: float
    """The delivery residual δ (the measured table's mean when there is one)."""
    pre: float
    """The prefetch-1 overhead (0 without prefetch 1)."""
    read: float
    """The consumer's read overhead (the measured hold's mean when there is one)."""
    table: QuantileTable | None
    """The measured client path's delivery table (``amqp`` only), else None."""


def _fixed_path(
    c: Costs,
    kind: str,
    lam: float,
    size: float,
    p: float,
    vt: float,
    *,
    confirms: bool,
    prefetch1: bool,
) -> _Path:
    """The stations in series up to the consumer (``threads``: the §4 tandem; ``amqp``: the
    calibrated fixed path), retries ((1 − p)/p)·VT included."""
    confirm_extra = c.confirm_over_a + c.confirm_over_b * size if confirms else 0.0
    pre = c.prefetch_over_a + c.prefetch_over_b * size if prefetch1 else 0.0
    if kind == "threads":
        n1, n2 = stage_counts(c.threads)
        w1 = _station_w(lam, c.receive, n1)
        w2 = _station_w(lam / p, c.dispatch, n2)
        to_consumer = confirm_extra + w1 + 2 * c.d + w2 / p + ((1 - p) / p) * vt + pre
        broker_wait = w2 / p
        delta = 0.0
    else:
        delta_a, delta_b = c.delivery_residual(lam)
        delta = delta_a + delta_b * size
        queue_s = c.queue_a + c.queue_b * size
        to_consumer = confirm_extra + 2 * c.d + queue_s + delta + ((1 - p) / p) * vt + pre
        broker_wait = 0.0
    table = c.residual_table(lam, size, False) if kind == "amqp" else None
    hold_t = c.hold_table(lam)
    read = hold_t.mean if hold_t is not None else float(c.read.mean)
    if table is not None:  # the measured path replaces the fitted δ (mean of the table)
        to_consumer += table.mean - delta
        delta = table.mean
    return _Path(to_consumer, broker_wait, delta, pre, read, table)


def _consumer_station(
    c: Costs,
    kind: str,
    lam: float,
    svc: float,
    n: int,
    qname: str,
    max_length: int | None,
    path: _Path,
) -> tuple[float, float, float, tuple[float, float, float] | None]:
    """The consumers as one station (M/M/n, or M/M/1/K with ``max_length``): throughput, mean
    wait for a consumer, mean queue depth and the latency quantiles (None: unknown)."""
    hold = (
        c.d + path.delta + path.pre + svc + path.read + c.d
    )  # credit is back when the ack arrives
    mu = 1.0 / hold
    if max_length is not None:
        _require(n == 1, "one consumer for M/M/1/K", f"{n} consumers read {qname!r}")
        st1k = analytic.mm1k(lam, mu, max_length + 1)
        return st1k.lam_eff, st1k.w - hold, st1k.l + lam * path.broker_wait, None
    st = analytic.mmn(lam, mu, n)
    # Allen–Cunneen: scale the M/M/n wait by (1 + c²)/2, c² the holding time's squared
    # coefficient of variation — its fixed parts make it less variable than exponential,
    # the calibrated delivery jitter and read time (heavy-tailed, cv up to ~5) more
    jitter = c.delivery_jitter(lam) if kind == "amqp" else None
    var = svc * svc + float(c.read.variance)
    var += float(jitter.variance) if jitter is not None else 0.0
    ac = (1.0 + var / (hold * hold)) / 2.0
    wq = st.wq * ac
    depth = lam * (wq + hold) + lam * path.broker_wait
    pq: tuple[float, float, float] | None = _latency_quantiles(
        path.to_consumer, path.table, st.p_wait, n * mu - lam, ac
    )
    if kind == "threads":
        pq = None
    return lam, wq, depth, pq


def _station_w(lam: float, dist: Any, n: int) -> float:
    """Sojourn W of an M/M/n station with service ``dist`` (0 for a zero-time stage)."""
    mean = float(dist.mean)
    if mean == 0.0:
        return 0.0
    _require(_exponential(dist), "exponential service", f"a broker stage has cv {dist.cv:.3g}")
    return analytic.mmn(lam, 1.0 / mean, n).w


def _latency_quantiles(
    to_consumer: float, table: Any, p_wait: float, rate: float, ac: float
) -> tuple[float, float, float]:
    """p50/p95/p99 of path + wait. Without a measured path table the path is a constant and
    the M/M/N wait's quantiles are exact; with one, the sum's quantiles are computed from
    200,000 paired draws (fixed seed: the same figures every time) — the path's spread matters
    at light load, where the wait is mostly zero."""
    qs = (0.5, 0.95, 0.99)
    if table is None:
        return tuple(to_consumer + ac * _wait_quantile(p_wait, rate, q) for q in qs)  # type: ignore[return-value]
    rng = np.random.default_rng(20261124)
    n = 200_000
    path = np.interp(rng.random(n), PROBS, table.q) + (to_consumer - table.mean)
    waits = np.where(rng.random(n) < p_wait, rng.exponential(1.0 / rate, n), 0.0) * ac
    return tuple(float(x) for x in np.quantile(path + waits, qs))  # type: ignore[return-value]


def _wait_quantile(p_wait: float, rate: float, q: float) -> float:
    """q-quantile of the M/M/N wait: P(Wq > t) = C·exp(−(Nμ − λ)t)."""
    if p_wait <= 1.0 - q:
        return 0.0
    return math.log(p_wait / (1.0 - q)) / rate
