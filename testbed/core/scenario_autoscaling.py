"""Cross-field checks of the `autoscaling:` section (docs/models.md §7, §8), called by
:func:`testbed.core.scenario_checks.check_scenario` with its issue collector."""

from __future__ import annotations

__all__ = ["check_autoscaling"]

from typing import TYPE_CHECKING, Any

from testbed.core.scenario_faults import ElasticQueues, StepScaling, TargetTracking
from testbed.core.suggest import did_you_mean

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario


def check_autoscaling(c: Any, s: Scenario) -> None:
    """References resolve and the scaled group fits its policy (errors go to `c`)."""
    consumer_names = [g.name for g in s.consumers]
    lb_aliases = [lb.alias for lb in s.topology.load_balanced]
    targets: set[str] = set()
    for ai, a in enumerate(s.autoscaling):
        ap: tuple[str | int, ...] = ("autoscaling", ai)
        group = s.consumer_group(a.target)
        if group is None:
            c.error(
                ap + ("target",),
                f"autoscaling target {a.target!r} is not a consumer group"
                f"{did_you_mean(a.target, consumer_names)}",
            )
            continue
        if a.target in targets:
            c.error(ap + ("target",), f"consumer group {a.target!r} is scaled twice")
        targets.add(a.target)
        if s.workers > 1:
            c.error(
                ("workers",),
                f"autoscaling needs workers: 1 (the scaled consumer pool lives in one Locust "
                f"process), got {s.workers}",
            )
        mean = float(group.service_time.mean)
        needs_capacity = (isinstance(a, TargetTracking) and a.metric == "drain_time") or (
            isinstance(a, StepScaling) and a.metric == "rate_ratio"
        )
        if needs_capacity and mean <= 0:
            c.error(
                ap + ("metric",),
                f"metric {getattr(a, 'metric', '')!r} needs the capacity 1/service_time, but "
                f"consumers[{consumer_names.index(a.target)}].service_time has mean 0",
            )
        if isinstance(a, ElasticQueues):
            lb = next((x for x in s.topology.load_balanced if x.alias == a.alias), None)
            if lb is None:
                c.error(
                    ap + ("alias",),
                    f"alias {a.alias!r} is not in topology.load_balanced"
                    f"{did_you_mean(a.alias, lb_aliases)}",
                )
                continue
            if group.queue != lb.alias:
                c.error(
                    ap + ("target",),
                    f"consumer group {a.target!r} reads {group.queue!r}, not the alias "
                    f"{lb.alias!r}",
                )
            if group.count != lb.queues:
                c.error(
                    ap + ("target",),
                    f"elastic queues run one consumer per member queue: group {a.target!r} "
                    f"has count {group.count} but alias {lb.alias!r} starts {lb.queues} queues",
                )
            _check_vm_capacity(c, ap, a, mean)
            if a.max_replicas > lb.max_queues:
                c.error(
                    ap + ("max_replicas",),
                    f"max_replicas {a.max_replicas} > max_queues {lb.max_queues} of alias "
                    f"{lb.alias!r}",
                )
        elif not a.min_replicas <= group.count <= a.max_replicas:
            c.error(
                ap + ("target",),
                f"group {a.target!r} starts {group.count} consumers, outside "
                f"[min_replicas {a.min_replicas}, max_replicas {a.max_replicas}]",
            )


def _check_vm_capacity(c: Any, ap: tuple[str | int, ...], a: ElasticQueues, mean: float) -> None:
    """`vm_capacity` is a whole host's rate (NPP's VM.capacity): warn when it is far from what
    its slots' consumers can serve, e.g. one slot's capacity given for a multi-slot host."""
    if mean <= 0:
        return
    slots = a.slots_per_vm / mean
    cap = float(a.vm_capacity)
    if not 0.6 <= cap / slots <= 1.5:
        c.warn(
            ap + ("vm_capacity",),
            f"vm_capacity {cap:g} msg/s is a whole host's capacity (NPP uses it), but "
            f"{a.slots_per_vm} slot(s) of consumers at 1/service_time serve {slots:g} msg/s",
        )
