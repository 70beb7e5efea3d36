"""The QoS loss table (docs/models.md §6, issue 6 point 5): measured, simulated and closed-form
message loss rate side by side, for a scenario with stochastic failures.

    table = loss_table(scenario, ledgers, events)     # -> summary.json "qos_loss" (or None)

- **QoS level** from the scenario (docs/models.md §6 mapping): BE = transient messages, auto-ack, no
  confirms; PC = transient messages, durable queue, manual ack; PCM = persistent messages,
  durable queue, confirms, manual ack. Anything else has no level and no table.
- **Loss rate** of a replication, measured or simulated: messages the supplier meant to send
  and that were never delivered (``sent − delivered_unique − dead_lettered``, which counts the
  sends missed while the broker was down as the formula does) per second of production
  (``duration − start`` of the producers). ``lost_rate`` is the ledger's ``lost`` (confirmed,
  never delivered) per second; ``unroutable_rate`` its ``unroutable`` (returned: published
  while a transient subscription's consumer was away) per second. All are means over
  replications, with a t interval for the loss rate when there are several.
- **Closed form**: ``analytic.loss_rate`` with λ the producers' rate, μ = consumers / mean
  service time, K the queue's ``max_length`` (default ``DEFAULT_K``), A_S = 1, A_M and γ_eq(M)
  from the broker's stochastic fault: τ = 1 / (MTTR + R) with R the broker's restart time
  for kills (0 for pauses) and γ = 1 / (MTTF·exp(−R/MTTF)), the mean up time of the injected
  process (``broker_uptime``), A_C, γ_eq(C), τ_eq(C) from the consumer group's stochastic crashes
  (``analytic.availability`` with γn = 0, c = 1). The terms of the formula are listed too;
  its ``lost_rate`` leaves out the broker-down term (sends the broker never accepted), the
  counterpart of the ledger's ``lost``. When the BE queue is a transient subscription whose
  producers publish ``mandatory``, the consumer-down term (sends while the consumer is down,
  which find no queue) is its ``unroutable_rate``, the counterpart of the ledger's
  ``unroutable``, and is left out of its ``lost_rate`` too.
  ``availability_broker`` on the measured and simulated rows is the fraction of the production
  time the broker was up (``broker_down``/``broker_up`` events).
"""

from __future__ import annotations

__all__ = [
    "qos_level",
    "closed_form_inputs",
    "closed_form_terms",
    "loss_table",
    "broker_uptime",
    "returns_unroutable",
    "DEFAULT_K",
]

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from emulator import analytic
from testbed.analysis.stats import t_interval
from testbed.core.availability import availability_from_events, restart_seconds
from testbed.core.load import arrival_mean_rate
from testbed.core.records import Ledger
from testbed.core.scenario import Scenario
from testbed.core.scenario_faults import StochasticFault

DEFAULT_K = 10_000
"""Queue capacity for the M/M/1/K of §6 when the queue has no ``max_length``."""
SIDES = {"measured": "measured", "predicted": "simulated"}


def qos_level(s: Scenario) -> str | None:
    """BE, PC or PCM for a one-queue scenario whose settings match the §6 mapping, else None."""
    if len(s.topology.queues) != 1 or not s.producers or not s.consumers:
        return None
    durable = s.topology.queues[0].durable
    persistent = {p.persistent for p in s.producers}
    confirms = {p.confirms for p in s.producers}
    acks = {c.ack for c in s.consumers}
    if persistent == {False} and confirms == {False} and acks == {"auto"}:
        return "BE"
    if persistent == {False} and durable and acks == {"after_processing"}:
        return "PC"
    if persistent == {True} and confirms == {True} and durable and acks == {"after_processing"}:
        return "PCM"
    return None


def returns_unroutable(s: Scenario) -> bool:
    """The one queue is a transient subscription and every producer publishes ``mandatory``:
    what is sent while its consumer is away comes back and is counted ``unroutable``."""
    return s.topology.queues[0].transient and all(p.mandatory for p in s.producers)


def _stochastic(s: Scenario, targets: Sequence[str]) -> StochasticFault | None:
    return next(
        (f for f in s.faults if isinstance(f, StochasticFault) and f.target in targets), None
    )


def closed_form_inputs(s: Scenario, restart_s: float | None = None) -> dict[str, Any] | None:
    """The §6 formula's inputs for ``s`` (None without a stochastic fault or a QoS level);
    ``restart_s``: the broker restart time the prediction used (its profile's measured figure),
    else the per-kind constant."""
    level = qos_level(s)
    broker = _stochastic(s, ["broker", "broker0"])
    consumers = _stochastic(s, [c.name for c in s.consumers])
    if level is None or (broker is None and consumers is None):
        return None
    lam = sum((arrival_mean_rate(p.arrival) or 0.0) * p.count for p in s.producers)
    mu = sum(c.count / float(c.service_time.mean) for c in s.consumers)
    k = s.topology.queues[0].max_length or DEFAULT_K
    restart = restart_s if restart_s is not None else restart_seconds(s.broker.kind)
    m = c = analytic.availability(0.0, 0.0, 1.0, 1.0, 1.0)
    if broker is not None:
        r = restart if broker.mode != "pause" else 0.0
        up = broker_uptime(float(broker.mttf), r)
        m = analytic.availability(1 / up, 0.0, 1 / (float(broker.mttr) + r), 1.0, 1.0)
    if consumers is not None:
        c = analytic.availability(
            1 / float(consumers.mttf), 0.0, 1 / float(consumers.mttr), 1.0, 1.0
        )
    return {
        "qos": level,
        "lam": lam,
        "mu": mu,
        "k": int(k),
        "a_s": 1.0,
        "a_m": m.a,
        "a_c": c.a,
        "gamma_eq_m": m.gamma_eq,
        "tau_eq_m": m.tau_eq,
        "gamma_eq_c": c.gamma_eq,
        "tau_eq_c": c.tau_eq,
        "restart_s": restart if broker is not None and broker.mode != "pause" else 0.0,
    }


def closed_form_terms(inputs: dict[str, Any]) -> analytic.LossBreakdown:
    """The §6 formula's terms for what `closed_form_inputs` returned."""
    args = {k: inputs[k] for k in ("lam", "mu", "k", "a_s", "a_m", "a_c")}
    return analytic.loss_breakdown(
        inputs["qos"],
        **args,
        gamma_eq_m=inputs["gamma_eq_m"],
        gamma_eq_c=inputs["gamma_eq_c"],
        tau_eq_c=inputs["tau_eq_c"],
    )


def broker_uptime(mttf: float, restart: float) -> float:
    """Mean up time between broker failures as the live runner injects them: the next time to
    failure (Exp(MTTF)) runs from the planned repair, so during the ``restart`` that follows it;
    a failure due before the broker is up again strikes as soon as it is (memorylessness gives
    E[max(TTF − R, 0)] = MTTF·exp(−R/MTTF))."""
    return mttf * math.exp(-restart / mttf)


def _span(s: Scenario) -> tuple[float, float]:
    start = min(float(p.start) for p in s.producers)
    return start, float(s.duration)


def _side_row(
    name: str, s: Scenario, ledgers: list[Ledger], events: pd.DataFrame | None
) -> dict[str, Any]:
    start, end = _span(s)
    span = max(end - start, 1e-9)
    rates = [(x.sent - x.delivered_unique - x.dead_lettered) / span for x in ledgers]
    lost = [x.lost / span for x in ledgers]
    unroutable = [x.unroutable / span for x in ledgers]
    avail: list[float] = []
    if events is not None and not events.empty:
        for rep in sorted(set(events.replication)):
            avail.append(availability_from_events(events[events.replication == rep], start, end))
    return {
        "source": name,
        "replications": len(ledgers),
        "loss_rate": float(np.mean(rates)) if rates else None,
        "loss_rate_ci": t_interval(rates),
        "lost_rate": float(np.mean(lost)) if lost else None,
        "unroutable_rate": float(np.mean(unroutable)) if unroutable else None,
        "undelivered": [x.sent - x.delivered_unique - x.dead_lettered for x in ledgers],
        "lost": [x.lost for x in ledgers],
        "unroutable": [x.unroutable for x in ledgers],
        "sent": [x.sent for x in ledgers],
        "availability_broker": float(np.mean(avail)) if avail else None,
    }


def loss_table(
    s: Scenario,
    ledgers: dict[str, list[Ledger]],
    events: pd.DataFrame | None = None,
    restart_s: float | None = None,
) -> dict[str, Any] | None:
    """The ``qos_loss`` section of ``analysis/summary.json`` (None when ``s`` is not a QoS
    experiment). ``ledgers``: per side (``measured``/``predicted``) the replications' ledgers;
    ``events``: the non-phase events of both sides (``source``, ``replication`` columns)."""
    inputs = closed_form_inputs(s, restart_s)
    if inputs is None:
        return None
    rows = []
    for side, name in SIDES.items():
        if not ledgers.get(side):
            continue
        ev = None
        if events is not None and not events.empty and "source" in events:
            ev = events[events.source == side]
        rows.append(_side_row(name, s, ledgers[side], ev))
    terms = closed_form_terms(inputs)
    breakdown = {k: v for k, v in dataclasses.asdict(terms).items() if k != "total"}
    returned = terms.consumer_down if returns_unroutable(s) and inputs["qos"] == "BE" else 0.0
    rows.append(
        {
            "source": "closed_form",
            "loss_rate": terms.total,
            "lost_rate": terms.total - terms.broker_down - returned,
            "unroutable_rate": returned,
            "availability_broker": inputs["a_m"],
            "terms": breakdown,
        }
    )
    start, end = _span(s)
    return {
        "qos": inputs["qos"],
        "window": [start, end],
        "inputs": {
            k: (None if isinstance(v, float) and math.isinf(v) else v) for k, v in inputs.items()
        },
        "rows": rows,
        "unit": "messages per second",
    }
