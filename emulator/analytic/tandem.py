"""The Jackson tandem of docs/models.md §4: sender and broker stages with timeout retries."""

from __future__ import annotations

__all__ = ["Tandem", "jackson_tandem"]

from dataclasses import dataclass

from emulator.analytic.queues import MMN, mmn
from testbed.core.argchecks import count, finite_non_negative, fmt, positive


@dataclass(frozen=True)
class Tandem:
    """Mean delivery time through the two stages; times in seconds, rates per second."""

    lam2: float  # attempt rate at the broker stage, λ/p
    w1: float  # mean time in the sender stage (M/M/N1 at λ)
    w2: float  # mean time per attempt in the broker stage (M/M/N2 at λ/p)
    t: float  # mean delivery time W1 + 2d + W2/p + ((1 − p)/p)·VT
    l: float  # noqa: E741  mean number of messages in the system, λ·T (Little)
    stage1: MMN | None = None
    stage2: MMN | None = None


def jackson_tandem(
    lam: float,
    mu1: float,
    n1: int,
    mu2: float,
    n2: int,
    p: float = 1.0,
    d: float = 0.0,
    vt: float = 0.0,
) -> Tandem:
    """Open Jackson tandem with retry feedback (docs/models.md §4); out of order, exponential.

    Sender stage M/M/N1 at λ; broker stage M/M/N2 at λ2 = λ/p, since each attempt succeeds with
    probability p and a failed one returns after the visibility timeout VT. With one-way network
    delay d: T = W1 + 2d + W2/p + ((1 − p)/p)·VT, L = λT.

    Raises ``ValueError`` unless 0 < p ≤ 1, d ≥ 0, VT ≥ 0, λ < N1·μ1 and λ/p < N2·μ2.
    """
    lam = finite_non_negative("λ (lam)", lam)
    mu1, mu2 = positive("μ1 (mu1)", mu1), positive("μ2 (mu2)", mu2)
    n1, n2 = count("n1", n1), count("n2", n2)
    if not (0.0 < p <= 1.0):
        raise ValueError(f"delivery success probability p must be in (0, 1], got {p!r}")
    d = finite_non_negative("network delay d", d)
    vt = finite_non_negative("visibility timeout vt", vt)
    if lam >= n1 * mu1:
        raise ValueError(f"unstable sender stage: λ = {fmt(lam)} ≥ n1·μ1 = {fmt(n1 * mu1)}")
    lam2 = lam / p
    if lam2 >= n2 * mu2:
        raise ValueError(f"unstable broker stage: λ/p = {fmt(lam2)} ≥ n2·μ2 = {fmt(n2 * mu2)}")
    s1, s2 = mmn(lam, mu1, n1), mmn(lam2, mu2, n2)
    t = s1.w + 2 * d + s2.w / p + ((1 - p) / p) * vt
    return Tandem(lam2=lam2, w1=s1.w, w2=s2.w, t=t, l=lam * t, stage1=s1, stage2=s2)
