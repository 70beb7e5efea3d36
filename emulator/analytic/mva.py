"""Exact mean value analysis of closed producers around one service centre (docs/models.md §5)."""

from __future__ import annotations

__all__ = ["MVA", "mva_closed", "mva_curve", "saturation_point"]

from dataclasses import dataclass

from testbed.core.argchecks import count, finite_non_negative, positive


@dataclass(frozen=True)
class MVA:
    """Closed network with N customers, think time Z and one queueing centre of demand D."""

    x: float  # throughput X(N), per second
    r: float  # response time at the centre R(N), seconds
    q: float  # mean number at the centre Q(N) = X·R
    n: int = 0  # population N
    n_star: float = 0.0  # saturation population N* = (D + Z)/D
    u: float = 0.0  # utilisation of the centre X·D


def saturation_point(think: float, demand: float) -> float:
    """N* = (D + Z)/D: where the asymptotes X = N/(D + Z) and X = 1/D cross (docs/models.md §5)."""
    think = finite_non_negative("think time Z", think)
    demand = positive("service demand D", demand)
    return (demand + think) / demand


def mva_curve(n: int, think: float, demand: float) -> tuple[MVA, ...]:
    """Exact MVA results for populations 1..n (docs/models.md §5), e.g. for a sweep curve.

    Q(0) = 0; R(k) = D(1 + Q(k−1)); X(k) = k/(R(k) + Z); Q(k) = X(k)R(k).
    """
    n = count("n (customers)", n)
    n_star = saturation_point(think, demand)
    out: list[MVA] = []
    q = 0.0
    for k in range(1, n + 1):
        r = demand * (1.0 + q)
        x = k / (r + think)
        q = x * r
        out.append(MVA(x=x, r=r, q=q, n=k, n_star=n_star, u=x * demand))
    return tuple(out)


def mva_closed(n: int, think: float, demand: float) -> MVA:
    """Exact MVA for ``n`` closed producers with think time Z and one centre of demand D.

    docs/models.md §5 (the closed-producer shape of §1 and the shared-lock model of §3b). X(N)
    tends to 1/D and R(N) to N·D − Z beyond the saturation point N* = (D + Z)/D.
    """
    return mva_curve(n, think, demand)[-1]
