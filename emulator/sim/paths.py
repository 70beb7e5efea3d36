"""Where a queue's delivery residual and a consumer's hold come from (docs/models.md §9).

With a measured client path in the profile, each queue draws its non-queueing delivery residual
from the delivery-delay table at the point of the scenario it sits in — the machine's total
message rate, the queue's typical message size, whether its messages are persistent, whether their
producers wait for confirms and whether consumers publish them from their handlers (follow-ups) —
and each consumer draws its hold beyond the service time from the hold table at that rate. Without
one, the older fit-plus-spread model of :mod:`emulator.sim.costs` applies.

A copy that waited at the broker (dispatched when a consumer's ack gave credit back) has only the
way back ahead of it, not the whole path: it draws from the client path's *turnaround* table —
a prefetch-1 consumer's ack → its start on a message already waiting — less the two network hops,
which the simulator models itself. Drawing the whole table again after such a wait counted
the publish side twice: on the ActiveMQ prefetch-1 holdout (three consumers at utilisation 0.6)
the simulated ack → next start of a waiting message took a median 0.61 ms, measured 0.34 ms.

The queue's typical size is the rate-weighted mean size of what producers send to it (follow-up
publishes count at their own sizes); a message of another size moves its draw by the residual's
linear size cost, so the table's shape is kept and only its location follows the size.
"""

from __future__ import annotations

__all__ = ["QueueTraffic", "queue_traffic", "set_residual", "total_rate"]

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emulator.sim.wake import WakeClock
from testbed.core.broker_kinds import KINDS
from testbed.core.consumer_idle import idle_scaler
from testbed.core.load import arrival_mean_rate
from testbed.core.quantiles import table_sampler
from testbed.core.scenario import Scenario

if TYPE_CHECKING:
    from emulator.sim.costs import Costs
    from emulator.sim.queues import Queue


@dataclass
class QueueTraffic:
    rate: float = 0.0
    bytes_rate: float = 0.0
    persistent_rate: float = 0.0
    confirmed_rate: float = 0.0
    """msg/s from producers that wait for each confirm."""
    follow_up_rate: float = 0.0
    """msg/s published by consumers from their handlers (follow-ups)."""

    @property
    def size(self) -> float | None:
        return self.bytes_rate / self.rate if self.rate > 0 else None

    @property
    def persistent(self) -> bool:
        return self.rate > 0 and self.persistent_rate >= self.rate / 2

    @property
    def confirmed(self) -> bool:
        """Most of its traffic is confirmed (draws from the confirmed table of its
        persistence)."""
        return self.rate > 0 and self.confirmed_rate >= self.rate / 2

    @property
    def follow_up(self) -> bool:
        """Most of its traffic is follow-ups (draws from the follow-up table)."""
        return self.rate > 0 and self.follow_up_rate >= self.rate / 2


def queue_traffic(s: Scenario) -> dict[str, QueueTraffic]:
    """Per queue: producers' rate, mean size and persistence (routing followed)."""
    out: dict[str, QueueTraffic] = {}

    def add(
        queues: list[str],
        rate: float,
        size: float,
        persistent: bool,
        confirms: bool,
        follow_up: bool = False,
    ) -> None:
        for q in queues:
            t = out.setdefault(q, QueueTraffic())
            t.rate += rate
            t.bytes_rate += rate * size
            t.persistent_rate += rate if persistent else 0.0
            t.confirmed_rate += rate if confirms else 0.0
            t.follow_up_rate += rate if follow_up else 0.0

    def targets(queue: str | None, exchange: str | None, key: Any) -> list[str]:
        if queue is not None:
            lb = next((x for x in s.topology.load_balanced if x.alias == queue), None)
            return [lb.member(i) for i in range(lb.max_queues)] if lb is not None else [queue]
        keys = key if isinstance(key, list) else [key]
        return [q for k in keys for q in s.routed_queues(exchange or "", k)]

    for p in s.producers:
        rate = (arrival_mean_rate(p.arrival) or 0.0) * p.count
        add(
            targets(p.queue, p.exchange, p.routing_key),
            rate, float(p.size.mean), p.persistent, p.confirms,
        )  # fmt: skip
    for c in s.consumers:
        for f in c.follow_ups:
            rate = f.probability * (out[c.queue].rate if c.queue in out else 0.0)
            add(
                targets(f.queue, f.exchange, f.routing_key),
                rate, float(f.size.mean), f.persistent, False, follow_up=True,
            )  # fmt: skip
    return out


def total_rate(loads: Mapping[str, Any]) -> float:
    """Deliveries per second the whole machine handles (every queue's offered rate)."""
    return float(sum(x.arrival_rate for x in loads.values()))


def set_residual(
    q: Queue,
    costs: Costs,
    traffic: QueueTraffic | None,
    machine_rate: float,
    rate: float,
    stream: Callable[[str], Any],
) -> None:
    """Give queue ``q`` its delivery residual draw: the measured client-path table at this
    scenario's point (and the turnaround for copies that waited) when the profile has one,
    else the fit's moment-matched spread. ``machine_rate``: every queue's offered msg/s;
    ``rate``: this queue's; ``stream(name)``: the replication's random stream ``name``."""
    size = traffic.size if traffic is not None and traffic.size is not None else None
    persistent = traffic.persistent if traffic is not None else False
    confirms = traffic.confirmed if traffic is not None else False
    follow_up = traffic.follow_up if traffic is not None else False
    ref = size if size is not None else costs.profile.reference_size
    table = costs.residual_table(machine_rate, ref, persistent, confirms, follow_up)
    name = q.name
    if table is not None:
        q.jitter = table_sampler(table, stream(f"queue:{name}:residual"))
        q.at = table.quantile
        q.broker.couple_copies = True
        cp = costs.profile.client_path
        if cp is not None and cp.wake and q.broker.wake is None:
            facts = KINDS.get(costs.profile.broker.kind)
            overlap = costs.per_destination if facts and facts.wake_overlaps_routing else 0.0
            q.broker.wake = WakeClock(cp.wake_delay, overlap)
        q.deliver_b = costs.size_slope(rate)
        q.deliver_a = -q.deliver_b * ref  # the table holds the whole residual at `ref`
        if cp is not None:
            q.idle_scale = idle_scaler(cp.idle_curve(machine_rate))
        turn = costs.turnaround_table(machine_rate, ref, q.deliver_b)
        if turn is not None:
            q.turn = table_sampler(turn, stream(f"queue:{name}:turnaround"))
        return
    spread = costs.delivery_jitter(rate)
    if spread is not None:
        draw = spread.sampler(stream(f"queue:{name}:jitter"))
        mean = float(spread.mean)
        q.jitter = lambda: draw() - mean
