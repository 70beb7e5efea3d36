"""Elastic load-balanced queues (docs/models.md §7), pure.

Producers send to an alias that forwards to n member queues, each read by its own consumer.
Every control round k:

- forwarding ratios r_i(k+1) = max(c_i(k) − (l_i − l_avg), 0) / C with C = Σ c_i(k): a queue
  that consumes more, or is shorter than average, gets more of the traffic. When the max(·, 0)
  clips a queue the ratios no longer sum to 1; they are renormalised (the formula's sum is 1
  exactly when nothing is clipped). With no consumption yet (C = 0) the split is even.
- average load l_avg > max_load: add a queue and its consumer (one per round, and not while a
  cold-started one is still booting, nor while one that is up has not yet had a full round of
  traffic: its queue is empty because it got nothing yet, so the average would ask again for
  the same shortfall).
- l_avg < min_load, and no scale-up for `down_delay` seconds: elect the queue added last and
  lower its ratio gradually, by `step` of its formula ratio per round; the plan is cancelled
  when l_avg rises above min_load again; once the factor reaches 0 and the queue is empty, it
  is removed (its consumer leaves gracefully, nothing is lost). Scale-down is slow on purpose,
  "to minimise wrong decisions": right after a scale-up the new queue is short and the average
  low while production is still rising, and removing a queue then undoes the scale-up.

Loads are queue lengths (ready + unacked, messages); c_i are ack rates (msg/s), as in the
published formula.
"""

from __future__ import annotations

__all__ = ["ElasticPlan", "ElasticQueuesPolicy", "ElasticStep", "forwarding_ratios"]

from dataclasses import dataclass, field

_EPS = 1e-9


def forwarding_ratios(c: dict[int, float], l: dict[int, float]) -> dict[int, float]:  # noqa: E741
    """r_i = max(c_i − (l_i − l_avg), 0) / C, renormalised if clipped; even split if C = 0."""
    keys = sorted(c)
    if not keys:
        return {}
    even = {k: 1.0 / len(keys) for k in keys}
    total_c = sum(c[k] for k in keys)
    if total_c <= 0:
        return even
    l_avg = sum(l[k] for k in keys) / len(keys)
    raw = {k: max(c[k] - (l[k] - l_avg), 0.0) / total_c for k in keys}
    s = sum(raw.values())
    if s <= 0:
        return even
    return {k: v / s for k, v in raw.items()}


@dataclass
class ElasticPlan:
    """A gradual scale-down in progress: `slot`'s ratio is multiplied by `factor`."""

    slot: int
    started: float
    factor: float = 1.0


@dataclass(frozen=True)
class ElasticStep:
    add: int
    remove: tuple[int, ...]
    ratios: dict[int, float]
    avg_load: float
    reason: str
    plan: dict[str, float] | None = None
    loads: dict[int, float] = field(default_factory=dict)


class ElasticQueuesPolicy:
    def __init__(
        self,
        *,
        min_load: float,
        max_load: float,
        min_queues: int = 1,
        max_queues: int = 10,
        step: float = 0.25,
        down_delay: float = 30.0,
    ) -> None:
        if not 0 <= min_load < max_load:
            raise ValueError(f"need 0 <= min_load ({min_load}) < max_load ({max_load})")
        if not 0 < step <= 1:
            raise ValueError(f"scale-down step must be in (0, 1], got {step!r}")
        if down_delay < 0:
            raise ValueError(f"scale-down delay must be >= 0 s, got {down_delay!r}")
        self.min_load = min_load
        self.max_load = max_load
        self.min_queues = max(1, min_queues)
        self.max_queues = max_queues
        self.step = step
        self.down_delay = float(down_delay)
        self.plan: ElasticPlan | None = None
        self.last_up = -float("inf")

    def decide(
        self,
        loads: dict[int, float],
        consumption: dict[int, float],
        *,
        starting: int,
        cold_starting: int,
        now: float,
        warming: int = 0,
        newest: int | None = None,
    ) -> ElasticStep:
        """One round. `loads`/`consumption` are l_i / c_i of the *ready* units by slot;
        `starting` units are asked for but not ready (no traffic), `cold_starting` of them
        wait for a host to boot; `warming` ready units have not had a full round of traffic
        yet; `newest` is the slot added last (None: the highest ready slot)."""
        active = sorted(loads)
        n = len(active)
        avg = sum(loads.values()) / n if n else 0.0
        add = 0
        remove: tuple[int, ...] = ()
        reason = "hold"
        if self.plan is not None and (avg > self.min_load or self.plan.slot not in loads):
            reason = "cancel_scale_down"
            self.plan = None
        if avg > self.max_load:
            if n + starting >= self.max_queues:
                reason = "at_max_queues"
            elif cold_starting:
                reason = "waiting_for_startup"
            elif warming:
                reason = "waiting_for_traffic"
            else:
                add, reason = 1, "scale_up"
                self.last_up = now
        elif avg < self.min_load and self.plan is None and starting == 0 and n > self.min_queues:
            if now - self.last_up < self.down_delay:
                reason = "scale_down_delay"
            else:
                slot = newest if newest is not None and newest in loads else active[-1]
                self.plan = ElasticPlan(slot, now)
                reason = "elect_scale_down"
        ratios = forwarding_ratios(consumption, loads)
        plan = self.plan
        if plan is not None:
            if reason == "hold":
                plan.factor = max(0.0, plan.factor - self.step)
                reason = "scale_down_step"
            if plan.factor <= _EPS:
                plan.factor = 0.0
            if plan.factor == 0.0 and loads[plan.slot] <= 0:
                remove, reason = (plan.slot,), "scale_down"
                self.plan = None
                ratios = forwarding_ratios(
                    {k: v for k, v in consumption.items() if k != plan.slot},
                    {k: v for k, v in loads.items() if k != plan.slot},
                )
            else:
                ratios = _damp(ratios, plan.slot, plan.factor)
        return ElasticStep(
            add,
            remove,
            ratios,
            avg,
            reason,
            None if self.plan is None else {"slot": self.plan.slot, "factor": self.plan.factor},
            dict(loads),
        )


def _damp(ratios: dict[int, float], slot: int, factor: float) -> dict[int, float]:
    """Multiply `slot`'s ratio by `factor`; the others share the rest in their proportions."""
    if slot not in ratios or len(ratios) == 1:
        return ratios
    r_e = ratios[slot] * factor
    rest = {k: v for k, v in ratios.items() if k != slot}
    s = sum(rest.values())
    out = (
        {k: v * (1.0 - r_e) / s for k, v in rest.items()}
        if s > 0
        else {k: (1.0 - r_e) / len(rest) for k in rest}
    )
    out[slot] = r_e
    return dict(sorted(out.items()))
