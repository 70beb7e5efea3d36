"""Single stations: M/M/N with Erlang C, and M/M/1/K (docs/models.md §5)."""

from __future__ import annotations

__all__ = ["MMN", "MM1K", "erlang_b", "erlang_c", "mmn", "mm1k"]

import math
from dataclasses import dataclass

from testbed.core.argchecks import count, finite_non_negative, fmt, positive


@dataclass(frozen=True)
class MMN:
    """M/M/N steady state. ``p_wait`` is Erlang C; times in seconds, rates per second."""

    rho: float  # utilisation λ/(Nμ)
    p_wait: float  # probability an arrival waits, C(N, λ/μ)
    lq: float  # mean number waiting
    l: float  # noqa: E741  mean number in the station
    wq: float  # mean wait before service
    w: float  # mean time in the station (wait + service)
    lam: float = 0.0
    mu: float = 0.0
    n: int = 1


@dataclass(frozen=True)
class MM1K:
    """M/M/1/K steady state (K = capacity including the message in service)."""

    p: tuple[float, ...]  # occupancy distribution p_0..p_K
    p_block: float  # p_K: an arrival finds the station full and is lost
    l: float  # noqa: E741  mean number in the station, N̄
    w: float  # mean time in the station of an accepted arrival: L / (λ(1 − p_K))
    rho: float = 0.0  # offered load λ/μ (may exceed 1)
    lam_eff: float = 0.0  # accepted rate λ(1 − p_K)


def erlang_b(n: int, a: float) -> float:
    """Erlang B blocking probability for ``n`` servers and offered load ``a`` = λ/μ.

    By the recursion B(0) = 1, B(k) = a·B(k−1)/(k + a·B(k−1)): no factorials, stable for
    thousands of servers.
    """
    n = count("n", n)
    a = finite_non_negative("offered load a", a)
    b = 1.0
    for k in range(1, n + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(n: int, a: float) -> float:
    """Erlang C waiting probability C(n, a) = n·B / (n − a(1 − B)), B = Erlang B; needs a < n."""
    n = count("n", n)
    a = finite_non_negative("offered load a", a)
    if a >= n:
        raise ValueError(f"Erlang C needs a = λ/μ < n: a = {fmt(a)} ≥ n = {n}")
    b = erlang_b(n, a)
    return n * b / (n - a * (1.0 - b))


def mmn(lam: float, mu: float, n: int) -> MMN:
    """M/M/N station (docs/models.md §5; the per-stage model of §3a and §4). n = 1 is M/M/1.

    Wq = C(n, λ/μ)/(nμ − λ), W = Wq + 1/μ, Lq = λWq, L = λW. Raises ``ValueError`` when
    ρ = λ/(nμ) ≥ 1.
    """
    lam = finite_non_negative("λ (lam)", lam)
    mu = positive("μ (mu)", mu)
    n = count("n", n)
    rho = lam / (n * mu)
    if rho >= 1:
        raise ValueError(
            f"unstable M/M/N: ρ = λ/(nμ) = {fmt(rho)} ≥ 1 (λ = {fmt(lam)}, μ = {fmt(mu)}, n = {n})"
        )
    c = erlang_c(n, lam / mu)
    wq = c / (n * mu - lam)
    w = wq + 1.0 / mu
    return MMN(rho=rho, p_wait=c, lq=lam * wq, l=lam * w, wq=wq, w=w, lam=lam, mu=mu, n=n)


def mm1k(lam: float, mu: float, k: int) -> MM1K:
    """M/M/1/K station (docs/models.md §5, the queue of §6).

    p_i = (1 − ρ)ρ^i / (1 − ρ^{K+1}) (ρ = λ/μ; p_i = 1/(K+1) at ρ = 1), computed in a scaled
    form that neither overflows nor loses the ρ → 1 limit. Any ρ ≥ 0 is allowed: the station
    is always stable. W is by Little's law with the accepted rate λ(1 − p_K); at λ = 0 it is
    the service time 1/μ.
    """
    lam = finite_non_negative("λ (lam)", lam)
    mu = positive("μ (mu)", mu)
    k = count("k", k)
    rho = lam / mu
    if lam == 0:
        p = [1.0] + [0.0] * k
    else:
        # p_i ∝ ρ^i; scale by the largest term (ρ^0 or ρ^K) so nothing overflows
        log_rho = math.log(rho)
        top = k if rho > 1 else 0
        weights = [math.exp((i - top) * log_rho) for i in range(k + 1)]
        total = math.fsum(weights)
        p = [x / total for x in weights]
    p_block = p[k]
    length = math.fsum(i * pi for i, pi in enumerate(p))
    lam_eff = lam * (1.0 - p_block)
    w = length / lam_eff if lam_eff > 0 else 1.0 / mu
    return MM1K(p=tuple(p), p_block=p_block, l=length, w=w, rho=rho, lam_eff=lam_eff)
