"""Elastic pre-provisioning and the HPA/KEDA replica formula (docs/models.md §7, §8).

Closed forms the live and simulated autoscalers both decide with; `emulator.analytic`
re-exports them beside the other closed forms."""

from __future__ import annotations

__all__ = ["hpa_desired", "npp"]

import math

from testbed.core.argchecks import count, finite_non_negative, positive

_EPS = 1e-9  # relative slack so that 3.0000000000000004 rounds up to 3, not 4


def _ceil(x: float) -> int:
    return math.ceil(x - _EPS * max(1.0, abs(x)))


def npp(sla_delta: float, vm_startup: float, vm_capacity: float) -> int:
    """Size of the pre-provisioned VM pool, NPP = ceil(SLA.delta × VM.startup / VM.capacity).

    docs/models.md §7: ``sla_delta`` is the largest load increase to absorb (msg/s²), ``vm_startup``
    the VM (consumer slot) start-up delay (s), ``vm_capacity`` one VM's capacity (msg/s). The
    pool covers the load that arrives while a new VM boots.
    """
    sla_delta = finite_non_negative("SLA.delta (sla_delta)", sla_delta)
    vm_startup = finite_non_negative("VM.startup (vm_startup)", vm_startup)
    vm_capacity = positive("VM.capacity (vm_capacity)", vm_capacity)
    return max(_ceil(sla_delta * vm_startup / vm_capacity), 0)


def hpa_desired(current: int, metric: float, target: float, tolerance: float = 0.1) -> int:
    """Kubernetes HPA / KEDA target tracking: desired = ceil(current × metric / target).

    docs/models.md §8. ``metric`` is the current per-replica value and ``target`` the desired one.
    No change while |metric/target − 1| ≤ ``tolerance`` (HPA's ±10 %). ``current`` = 0 is the
    KEDA activation step: 1 replica if ``metric`` > 0, else 0. Min/max replicas and the
    scale-down stabilisation window belong to the policy that calls this.
    """
    current = count("current replicas", current, minimum=0)
    metric = finite_non_negative("metric", metric)
    target = positive("target", target)
    tolerance = finite_non_negative("tolerance", tolerance)
    if current == 0:
        return 1 if metric > 0 else 0
    # |metric - target| <= tolerance x target is |ratio - 1| <= tolerance without the division's
    # rounding: 55 / 50 - 1 is 0.10000000000000009 in floating point, and a queue of exactly
    # 10 % over its target scaled up where the rule says it stays
    if abs(metric - target) <= tolerance * target:
        return current
    return _ceil(current * metric / target)
