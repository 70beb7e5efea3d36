"""Pure control policies: no clock, broker or socket inside (docs/architecture.md principle 4).

Callers pass `now` explicitly. The autoscalers run both in the live control loop
(`testbed/control/`) and inside the SimPy model (`emulator/sim/`); the visibility lease book
serves the live side only.

- :mod:`.visibility` — visibility-timeout leases (docs/models.md §4).
- :mod:`.provisioning` — start-up delays, co-provisioning slots and the pre-provisioned pool
  (docs/models.md §7): *when* a consumer the policy asked for can take messages.
- :mod:`.scaling` — target tracking (HPA/KEDA) and step/threshold policies (docs/models.md §8).
- :mod:`.elastic` — elastic load-balanced queues with forwarding ratios (docs/models.md §7).
- :mod:`.sizing` — the closed forms they size with: NPP and the HPA/KEDA replica formula.
- :mod:`.autoscaler` — one policy + its provisioner behind ``decide(observation, now)``.
"""

from __future__ import annotations

from testbed.core.policies.autoscaler import Autoscaler, Decision, make_autoscaler
from testbed.core.policies.elastic import ElasticPlan, ElasticQueuesPolicy, forwarding_ratios
from testbed.core.policies.observation import Observation, QueueObservation
from testbed.core.policies.provisioning import Provisioner, Start
from testbed.core.policies.scaling import (
    Recommendation,
    StepPolicy,
    TargetTrackingPolicy,
    metric_value,
)
from testbed.core.policies.visibility import Lease, LeaseBook, VisibilityAction

__all__ = [
    "Autoscaler",
    "Decision",
    "ElasticPlan",
    "ElasticQueuesPolicy",
    "Lease",
    "LeaseBook",
    "Observation",
    "Provisioner",
    "QueueObservation",
    "Recommendation",
    "Start",
    "StepPolicy",
    "TargetTrackingPolicy",
    "VisibilityAction",
    "forwarding_ratios",
    "make_autoscaler",
    "metric_value",
]
