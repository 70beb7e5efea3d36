"""Offered load of a scenario: each producer's long-run rate and, per queue, the arrival and
attempt rates and the utilisation ρ (of an in-order queue: of its one active consumer, held for
the visibility timeout by each failed attempt). One computation for the live side (the
stability check at load, `testbed.core.scenario_checks`), the simulator (sizing its
random-number batches and delivery costs) and the closed forms.
"""

from __future__ import annotations

__all__ = ["arrival_mean_rate", "offered_load", "QueueLoad"]

import math
from dataclasses import dataclass
from typing import Any

from testbed.core.scenario import (
    ClosedArrival,
    ConstantArrival,
    MmppArrival,
    PoissonArrival,
    RampArrival,
    Scenario,
    StepsArrival,
    TraceArrival,
)
from testbed.core.visibility import holds_head_of_line


def arrival_mean_rate(arrival: Any) -> float | None:
    """Long-run offered rate of one producer (None for closed loops: they cannot overload)."""
    if isinstance(arrival, PoissonArrival | ConstantArrival):
        return float(arrival.rate)
    if isinstance(arrival, MmppArrival):
        # cyclic switching: time share of state i is proportional to its mean sojourn
        total = sum(arrival.mean_sojourns)
        return sum(r * t for r, t in zip(arrival.rates, arrival.mean_sojourns, strict=True)) / total
    if isinstance(arrival, RampArrival):
        return float(max(arrival.from_, arrival.to))
    if isinstance(arrival, StepsArrival):
        return float(max(step.rate for step in arrival.steps))
    if isinstance(arrival, TraceArrival):
        t = arrival.times
        return len(t) / t[-1] if len(t) > 1 and t[-1] > 0 else None
    if isinstance(arrival, ClosedArrival):
        return None
    return None


@dataclass(frozen=True)
class QueueLoad:
    queue: str
    arrival_rate: float  # first attempts per second
    attempt_rate: float  # incl. retries after failed deliveries
    consumers: int
    mean_service: float
    utilisation: float  # attempt_rate * mean_service / consumers (inf with no consumers)
    hold_s: float = 0.0
    """In order: the visibility timeout each failed attempt holds the queue's one active
    consumer for (then ρ = arrival_rate·mean_service + (attempt_rate − arrival_rate)·hold_s)."""


def offered_load(s: Scenario) -> dict[str, QueueLoad]:
    """Per-queue offered load and utilisation ρ, following routing and follow-up chains."""
    lam: dict[str, float] = {q: 0.0 for q in s.queue_names()}

    def route(queue: str | None, exchange: str | None, key: Any, rate: float) -> None:
        if queue is not None:
            lam[queue] = lam.get(queue, 0.0) + rate
            return
        if exchange is None:
            return
        keys = key if isinstance(key, list) else [key]
        for k in keys:
            for q in s.routed_queues(exchange, k):
                lam[q] = lam.get(q, 0.0) + rate / len(keys)

    for p in s.producers:
        r = arrival_mean_rate(p.arrival)
        if r is not None:
            route(p.queue, p.exchange, p.routing_key, r * p.count)
    base = dict(lam)
    for _ in range(20):  # follow-up chains: fixed point over the (usually acyclic) graph
        nxt = dict(base)
        for cg in s.consumers:
            for f in cg.follow_ups:
                src = lam.get(cg.queue, 0.0)
                share = 1.0 if f.on is None else _type_share(s, cg.queue, f.on)
                r = src * share * f.probability
                if f.queue is not None:
                    nxt[f.queue] = nxt.get(f.queue, 0.0) + r
                elif f.exchange is not None:
                    for q in s.routed_queues(f.exchange, f.routing_key):
                        nxt[q] = nxt.get(q, 0.0) + r
        if all(math.isclose(nxt.get(k, 0), lam.get(k, 0), rel_tol=1e-9) for k in nxt):
            break
        lam = nxt
    out: dict[str, QueueLoad] = {}
    for q, rate in lam.items():
        groups = [cg for cg in s.consumers if cg.queue == q]
        n = 0
        work = 0.0
        attempts = rate
        for cg in groups:
            count = cg.count
            for a in s.autoscaling:
                if a.target == cg.name:
                    count = max(count, a.max_replicas)
            n += count
            work += count * float(cg.service_time.mean)
            if cg.failure_probability > 0:
                attempts = max(attempts, rate / (1 - cg.failure_probability))
        mean_s = work / n if n else 0.0
        spec = s.queue(q)
        vis = spec.visibility if spec is not None else None
        hold = float(vis.timeout) if vis is not None and holds_head_of_line(vis) else 0.0
        if rate == 0:
            rho = 0.0
        elif n == 0:
            rho = math.inf
        elif hold:  # one consumer at a time; a failed attempt blocks the line for VT
            rho = rate * mean_s + (attempts - rate) * hold
        else:
            rho = attempts * mean_s / n
        out[q] = QueueLoad(q, rate, attempts, n, mean_s, rho, hold)
    return out


def _type_share(s: Scenario, queue: str, type_label: str) -> float:
    """Rough share of a queue's traffic carrying `type_label` (1 if it is the only type)."""
    producers = [p for p in s.producers if p.queue == queue]
    if not producers:
        return 1.0
    hits = [p for p in producers if p.type_label == type_label]
    return len(hits) / len(producers) if hits else 1.0
