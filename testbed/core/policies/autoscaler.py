"""One scaled consumer group: a policy plus its provisioner behind ``decide(observation, now)``.

The live control loop (:mod:`testbed.control.autoscaler`) and the simulator
(:mod:`emulator.sim.autoscale`) build the same object with :func:`make_autoscaler` and act on
the :class:`Decision`: start each `Start` at its ``ready_at``, stop each slot in ``stops``
gracefully, and (elastic) forward the alias's traffic by ``ratios``. Every decision — also
"hold" — goes to ``events`` as a ``scale`` row whose detail carries its inputs.
"""

from __future__ import annotations

__all__ = ["Autoscaler", "Decision", "make_autoscaler", "pool_size"]

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from testbed.core.policies.elastic import ElasticQueuesPolicy
from testbed.core.policies.observation import Observation
from testbed.core.policies.provisioning import Provisioner, Start
from testbed.core.policies.scaling import StepPolicy, TargetTrackingPolicy
from testbed.core.policies.sizing import npp

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario
    from testbed.core.scenario_faults import Autoscaling


@dataclass(frozen=True)
class Decision:
    t: float
    target: str
    policy: str
    current: int
    desired: int
    reason: str
    inputs: dict[str, Any]
    starts: tuple[Start, ...] = ()
    stops: tuple[int, ...] = ()
    ratios: dict[str, float] | None = None
    """Elastic: member queue -> forwarding ratio (ready members only)."""

    @property
    def action(self) -> str:
        if self.starts and not self.stops:
            return "up"
        if self.stops and not self.starts:
            return "down"
        return "none" if not self.starts else "replace"

    def detail(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "action": self.action,
            "reason": self.reason,
            "current": self.current,
            "desired": self.desired,
            **self.inputs,
        }
        if self.starts:
            out["starts"] = [s.to_json() for s in self.starts]
        if self.stops:
            out["stops"] = list(self.stops)
        if self.ratios is not None:
            out["ratios"] = {k: round(v, 4) for k, v in self.ratios.items()}
        return out


@dataclass
class Autoscaler:
    """Drives one policy for consumer group `target` reading `queue` (or alias members)."""

    target: str
    queue: str
    policy: TargetTrackingPolicy | StepPolicy | ElasticQueuesPolicy
    provisioner: Provisioner
    interval: float
    alias: str | None = None
    decisions: list[Decision] = field(default_factory=list)
    offered: dict[int, float] = field(default_factory=dict)
    """Elastic: slot -> when its member was first given traffic (the initial ones at once)."""

    def __post_init__(self) -> None:
        self.offered.update({s: -float("inf") for s in self.provisioner.units})

    @property
    def kind(self) -> str:
        p = self.policy
        if isinstance(p, ElasticQueuesPolicy):
            return "elastic"
        return "target_tracking" if isinstance(p, TargetTrackingPolicy) else "step"

    def queue_of(self, slot: int) -> str:
        """The queue the consumer in `slot` reads: its member queue for elastic aliases."""
        return f"{self.alias}.{slot}" if self.alias is not None else self.queue

    def watched_queues(self) -> list[str]:
        if self.alias is None:
            return [self.queue]
        return [self.queue_of(i) for i in range(self.provisioner.max_units)]

    def decide(self, obs: Observation, now: float) -> Decision:
        prov = self.provisioner
        current = prov.count()
        base = {
            "ready": obs.ready,
            "unacked": obs.unacked,
            "publish_rate": round(obs.publish_rate, 3),
            "ack_rate": round(obs.ack_rate, 3),
            "running": len(prov.ready(now)),
            "starting": len(prov.starting(now)),
        }
        p = self.policy
        if isinstance(p, ElasticQueuesPolicy):
            d = self._elastic(p, obs, now, current, base)
        else:
            rec = p.recommend(obs, current, now)
            starts: list[Start] = []
            stops: list[int] = []
            if rec.desired > current:
                starts = [prov.add(now) for _ in range(rec.desired - current)]
            elif rec.desired < current:
                # the newest first: starting ones before running ones (HPA removes pending pods)
                by_age = sorted(prov.units, key=lambda s: (prov.ready_at(s), s), reverse=True)
                stops = by_age[: current - rec.desired]
                for s in stops:
                    prov.remove(s)
            inputs = {**rec.inputs(), **base}
            if isinstance(p, TargetTrackingPolicy):
                inputs["target_value"] = p.target_value
            d = Decision(
                now,
                self.target,
                self.kind,
                current,
                rec.desired,
                rec.reason,
                inputs,
                tuple(starts),
                tuple(stops),
            )
        self.decisions.append(d)
        return d

    def _elastic(
        self,
        p: ElasticQueuesPolicy,
        obs: Observation,
        now: float,
        current: int,
        base: dict[str, Any],
    ) -> Decision:
        prov = self.provisioner
        ready = prov.ready(now)
        starting = prov.starting(now)
        loads = {s: float(obs.queue(self.queue_of(s)).length) for s in ready}
        cons = {s: obs.queue(self.queue_of(s)).ack_rate for s in ready}
        # a ready member given no traffic a full period ago has an empty queue for that reason
        warming = [s for s in ready if now - self.offered.get(s, now) < self.interval - 1e-6]
        # every unit not ready yet waits for a host to boot (pool and free slots are immediate)
        step = p.decide(
            loads,
            cons,
            starting=len(starting),
            cold_starting=len(starting),
            now=now,
            warming=len(warming),
            newest=prov.newest(),
        )
        starts = tuple(prov.add(now) for _ in range(step.add))
        for s in step.remove:
            prov.remove(s)
            self.offered.pop(s, None)
        for s, r in step.ratios.items():
            if r > 0:
                self.offered.setdefault(s, now)
        ratios = {self.queue_of(s): r for s, r in step.ratios.items()}
        for st in starts:  # a member that is up at once takes traffic from the next round on
            ratios.setdefault(self.queue_of(st.slot), 0.0)
        inputs = {
            "metric": "queue_length",
            "avg_load": round(step.avg_load, 3),
            "min_load": p.min_load,
            "max_load": p.max_load,
            "loads": {self.queue_of(s): v for s, v in step.loads.items()},
            "consumption": {self.queue_of(s): round(v, 3) for s, v in cons.items()},
            **base,
            "hosts": prov.hosts_up(),
            "pool": len(prov.pool),
        }
        if step.plan is not None:
            inputs["plan"] = {
                "queue": self.queue_of(int(step.plan["slot"])),
                "factor": step.plan["factor"],
            }
        return Decision(
            now,
            self.target,
            "elastic",
            current,
            prov.count(),
            step.reason,
            inputs,
            starts,
            step.remove,
            ratios,
        )


def pool_size(spec: Autoscaling) -> int:
    """Pool size: `preprovisioned`, else NPP from sla_delta (docs/models.md §7), else 0."""
    from testbed.core.scenario_faults import ElasticQueues

    if not isinstance(spec, ElasticQueues):
        return 0
    if spec.preprovisioned is not None:
        return spec.preprovisioned
    if spec.sla_delta is None:
        return 0
    return npp(spec.sla_delta, float(spec.startup_delay), float(spec.vm_capacity))


def make_autoscaler(scenario: Scenario, spec: Autoscaling) -> Autoscaler:
    """The autoscaler of one `autoscaling:` entry (the scenario has been validated)."""
    from testbed.core.scenario_faults import ElasticQueues, TargetTracking

    group = scenario.consumer_group(spec.target)
    if group is None:
        raise ValueError(f"autoscaling target {spec.target!r} is not a consumer group")
    mean = float(group.service_time.mean)
    capacity = 1.0 / mean if mean > 0 else None
    policy: TargetTrackingPolicy | StepPolicy | ElasticQueuesPolicy
    alias = None
    if isinstance(spec, ElasticQueues):
        lb = next(x for x in scenario.topology.load_balanced if x.alias == spec.alias)
        alias = lb.alias
        policy = ElasticQueuesPolicy(
            min_load=spec.min_load,
            max_load=spec.max_load,
            min_queues=max(1, spec.min_replicas),
            max_queues=min(spec.max_replicas, lb.max_queues),
            step=spec.scale_down_step,
            down_delay=float(spec.scale_down_stabilization),
        )
        max_units = min(spec.max_replicas, lb.max_queues)
        initial = lb.queues
    elif isinstance(spec, TargetTracking):
        policy = TargetTrackingPolicy(
            spec.target_value,
            metric=spec.metric,
            tolerance=spec.tolerance,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            scale_up_window=float(spec.scale_up_stabilization),
            scale_down_window=float(spec.scale_down_stabilization),
            capacity=capacity,
        )
        max_units, initial = spec.max_replicas, group.count
    else:
        policy = StepPolicy(
            min_load=spec.min_load,
            max_load=spec.max_load,
            metric=spec.metric,
            step=spec.step,
            min_replicas=spec.min_replicas,
            max_replicas=spec.max_replicas,
            scale_up_cooldown=float(spec.scale_up_stabilization),
            scale_down_cooldown=float(spec.scale_down_stabilization),
            capacity=capacity,
        )
        max_units, initial = spec.max_replicas, group.count
    prov = Provisioner(
        float(spec.startup_delay),
        slots_per_vm=getattr(spec, "slots_per_vm", 1),
        pool=pool_size(spec),
        max_units=max_units,
        initial=min(initial, max_units),
    )
    interval = float(spec.period if isinstance(spec, ElasticQueues) else spec.interval)
    return Autoscaler(spec.target, group.queue, policy, prov, interval, alias)
