"""Availability of a component and expected message loss rate by QoS (docs/models.md §6)."""

from __future__ import annotations

__all__ = [
    "Availability",
    "LossBreakdown",
    "QOS_LEVELS",
    "availability",
    "loss_breakdown",
    "loss_rate",
]

import math
from dataclasses import dataclass

from emulator.analytic.queues import mm1k
from testbed.core.argchecks import count, finite_non_negative, positive, probability

QOS_LEVELS = ("BE", "PC", "PCM")
"""Best effort; persistent connections; persistent connections and messages."""


@dataclass(frozen=True)
class Availability:
    """Steady state of the UP / process-failed / node-failed CTMC and its two-state equivalent."""

    a: float  # availability τ_eq/(γ_eq + τ_eq) (equals π_UP)
    gamma_eq: float  # failure rate γp + γn, per second
    tau_eq: float  # equivalent repair rate, per second (inf when the component never fails)
    pi_up: float
    pi_pf: float  # process failed, being restarted
    pi_nf: float  # node failed (or restart not covered), being repaired


@dataclass(frozen=True)
class LossBreakdown:
    """The terms of the §6 loss-rate formula, in messages per second; ``total`` is their sum."""

    total: float
    broker_crash: float  # A_S A_M A_C γ_eq(M) N̄: queued messages lost when the broker crashes
    broker_down: float  # A_S (1−A_M) A_C λ: sends while the broker is down
    consumer_crash: float  # A_S A_M A_C γ_eq(C) N̄ (BE only): queue dropped with the consumer
    consumer_down: float  # A_S A_M (1−A_C) λ [× overflow sum for PC/PCM]
    blocking: float  # A_S A_M A_C λ p_K: arrivals to a full queue


def availability(
    gamma_p: float, gamma_n: float, tau_p: float, tau_n: float, c: float
) -> Availability:
    """Component availability from the docs/models.md §6 CTMC.

    UP →(γp) PF, PF →(c·τp) UP, PF →((1−c)·τp) NF, UP →(γn) NF, NF →(τn) UP, hence
    π_UP = [1 + γp/τp + (γn + (1−c)γp)/τn]⁻¹, π_PF = (γp/τp)π_UP, π_NF = ((γn + (1−c)γp)/τn)π_UP,
    γ_eq = γp + γn, τ_eq = (π_PF·c·τp + π_NF·τn)/(π_PF + π_NF), A = τ_eq/(γ_eq + τ_eq).
    A component that never fails (γp = γn = 0) has A = 1 and τ_eq = inf.
    """
    gamma_p = finite_non_negative("γp (gamma_p)", gamma_p)
    gamma_n = finite_non_negative("γn (gamma_n)", gamma_n)
    tau_p = positive("τp (tau_p)", tau_p)
    tau_n = positive("τn (tau_n)", tau_n)
    c = probability("coverage c", c)
    x_pf = gamma_p / tau_p
    x_nf = (gamma_n + (1.0 - c) * gamma_p) / tau_n
    pi_up = 1.0 / (1.0 + x_pf + x_nf)
    pi_pf, pi_nf = x_pf * pi_up, x_nf * pi_up
    gamma_eq = gamma_p + gamma_n
    if gamma_eq == 0:
        return Availability(1.0, 0.0, math.inf, 1.0, 0.0, 0.0)
    tau_eq = (pi_pf * c * tau_p + pi_nf * tau_n) / (pi_pf + pi_nf)
    a = tau_eq / (gamma_eq + tau_eq)
    return Availability(a, gamma_eq, tau_eq, pi_up, pi_pf, pi_nf)


def loss_breakdown(
    qos: str,
    lam: float,
    mu: float,
    k: int,
    a_s: float,
    a_m: float,
    a_c: float,
    gamma_eq_m: float,
    gamma_eq_c: float,
    tau_eq_c: float,
) -> LossBreakdown:
    """The terms of ``loss_rate`` (docs/models.md §6), for reports on where loss comes from."""
    level = qos.upper() if isinstance(qos, str) else qos
    if level not in QOS_LEVELS:
        raise ValueError(f"qos must be one of {', '.join(QOS_LEVELS)}, got {qos!r}")
    a_s, a_m, a_c = probability("A_S", a_s), probability("A_M", a_m), probability("A_C", a_c)
    gamma_eq_m = finite_non_negative("γ_eq(M)", gamma_eq_m)
    gamma_eq_c = finite_non_negative("γ_eq(C)", gamma_eq_c)
    tau_eq_c = positive("τ_eq(C)", tau_eq_c, allow_inf=True)
    queue = mm1k(lam, mu, count("k", k))
    lam, k = float(lam), len(queue.p) - 1
    n_bar, p_k = queue.l, queue.p_block
    up = a_s * a_m * a_c
    broker_crash = up * gamma_eq_m * n_bar if level in ("BE", "PC") else 0.0
    broker_down = a_s * (1 - a_m) * a_c * lam
    consumer_crash = up * gamma_eq_c * n_bar if level == "BE" else 0.0
    consumer_down = a_s * a_m * (1 - a_c) * lam
    if level in ("PC", "PCM"):
        fill = lam / (lam + tau_eq_c) if lam > 0 else 0.0
        consumer_down *= math.fsum(fill ** (k - i) * p_i for i, p_i in enumerate(queue.p))
    blocking = up * lam * p_k
    parts = (broker_crash, broker_down, consumer_crash, consumer_down, blocking)
    return LossBreakdown(math.fsum(parts), *parts)


def loss_rate(
    qos: str,
    lam: float,
    mu: float,
    k: int,
    a_s: float,
    a_m: float,
    a_c: float,
    gamma_eq_m: float,
    gamma_eq_c: float,
    tau_eq_c: float,
) -> float:
    """Expected message loss rate (messages per second) for a QoS level (docs/models.md §6).

    ``qos`` is "BE", "PC" or "PCM" (case-insensitive). The queue in the messaging service is
    M/M/1/K with input λ, delivery rate μ and capacity k (``mm1k``): N̄ its mean length, p_i its
    occupancy distribution, p_K its blocking probability. ``a_s``, ``a_m``, ``a_c`` are the
    availabilities of supplier, messaging service and consumer; ``gamma_eq_m``, ``gamma_eq_c``
    and ``tau_eq_c`` come from ``availability``.
    - BE:  A_S A_M A_C γ_eq(M) N̄ + A_S(1−A_M)A_C λ + A_S A_M A_C γ_eq(C) N̄
           + A_S A_M (1−A_C) λ + A_S A_M A_C λ p_K
    - PC:  A_S A_M A_C γ_eq(M) N̄ + A_S(1−A_M)A_C λ
           + A_S A_M (1−A_C) λ Σ_{i=0..K} (λ/(λ+τ_eq(C)))^{K−i} p_i + A_S A_M A_C λ p_K
    - PCM: the PC formula without the broker-crash term.
    """
    return loss_breakdown(qos, lam, mu, k, a_s, a_m, a_c, gamma_eq_m, gamma_eq_c, tau_eq_c).total
