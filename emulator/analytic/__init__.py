"""Closed-form queueing and performability models (docs/models.md §4–§8).

All rates per second, all times in seconds; results are frozen dataclasses. Invalid or unstable
inputs raise ``ValueError`` naming the violated condition with its numbers.

    from emulator import analytic
    analytic.mmn(lam, mu, n)              -> MMN(rho, p_wait, lq, l, wq, w)
    analytic.mm1k(lam, mu, k)             -> MM1K(p, p_block, l, w)
    analytic.jackson_tandem(lam, mu1, n1, mu2, n2, p=1.0, d=0.0, vt=0.0)
                                          -> Tandem(lam2, w1, w2, t, l)
    analytic.mva_closed(n, think, demand) -> MVA(x, r, q)   (+ n, n_star, u)
    analytic.availability(gamma_p, gamma_n, tau_p, tau_n, c)
                                          -> Availability(a, gamma_eq, tau_eq, pi_up, pi_pf, pi_nf)
    analytic.loss_rate(qos, lam, mu, k, a_s, a_m, a_c, gamma_eq_m, gamma_eq_c, tau_eq_c) -> float
    analytic.npp(sla_delta, vm_startup, vm_capacity) -> int
    analytic.hpa_desired(current, metric, target, tolerance=0.1) -> int
"""

from __future__ import annotations

__all__ = [
    "MM1K",
    "MMN",
    "MVA",
    "QOS_LEVELS",
    "Availability",
    "LossBreakdown",
    "Tandem",
    "availability",
    "erlang_b",
    "erlang_c",
    "hpa_desired",
    "jackson_tandem",
    "loss_breakdown",
    "loss_rate",
    "mm1k",
    "mmn",
    "mva_closed",
    "mva_curve",
    "npp",
    "saturation_point",
]

from emulator.analytic.mva import MVA, mva_closed, mva_curve, saturation_point
from emulator.analytic.performability import (
    QOS_LEVELS,
    Availability,
    LossBreakdown,
    availability,
    loss_breakdown,
    loss_rate,
)
from emulator.analytic.queues import MM1K, MMN, erlang_b, erlang_c, mm1k, mmn
from emulator.analytic.tandem import Tandem, jackson_tandem
from testbed.core.policies.sizing import hpa_desired, npp
