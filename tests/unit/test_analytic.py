"""Closed forms (docs/models.md §4–§8) against numbers computed independently of the code under test:
textbook values, exact rational arithmetic of the textbook formulas, log-space sums, CTMC solves
with numpy, and short seeded Ciw simulations.
"""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError, fields
from fractions import Fraction as F

import ciw
import numpy as np
import pytest

from emulator import analytic

# --- independent references ------------------------------------------------------------------


def erlang_c_textbook(n: int, a: F) -> F:
    """C(n, a) = (aⁿ/n!)(n/(n−a)) / (Σ_{k<n} aᵏ/k! + (aⁿ/n!)(n/(n−a))), exactly."""
    top = a**n / math.factorial(n) * F(n) / (n - a)
    return top / (sum(a**k / math.factorial(k) for k in range(n)) + top)


def erlang_c_logspace(n: int, a: float) -> float:
    """The same formula with every term aᵏ/k! taken in log space (lgamma), scaled by the largest."""
    logs = np.array([k * math.log(a) - math.lgamma(k + 1) for k in range(n + 1)])
    logs[n] += math.log(n / (n - a))
    terms = np.exp(logs - logs.max())
    return float(terms[n] / terms.sum())


def birth_death_stationary(birth: list[float], death: list[float]) -> np.ndarray:
    """Stationary law of a birth–death CTMC by solving πQ = 0, Σπ = 1 with numpy."""
    size = len(birth) + 1
    q = np.zeros((size, size))
    for i, b in enumerate(birth):
        q[i, i + 1] = b
    for i, d in enumerate(death, start=1):
        q[i, i - 1] = d
    np.fill_diagonal(q, -q.sum(axis=1))
    a = np.vstack([q.T, np.ones(size)])
    rhs = np.zeros(size + 1)
    rhs[-1] = 1.0
    return np.linalg.lstsq(a, rhs, rcond=None)[0]


# --- M/M/1 and M/M/N -------------------------------------------------------------------------


def test_mm1_closed_forms() -> None:
    r = analytic.mmn(1.0, 2.0, 1)  # ρ = 0.5
    assert r.rho == pytest.approx(0.5)
    assert r.p_wait == pytest.approx(0.5)  # P(wait) = ρ
    assert r.l == pytest.approx(1.0)  # ρ/(1−ρ)
    assert r.lq == pytest.approx(0.5)  # ρ²/(1−ρ)
    assert r.w == pytest.approx(2 / 2.0)  # 1/(μ−λ) = 2/μ at ρ = ½
    assert r.wq == pytest.approx(0.5)  # ρ/(μ−λ)
    r9 = analytic.mmn(9.0, 10.0, 1)
    assert r9.l == pytest.approx(9.0) and r9.w == pytest.approx(1.0)


def test_result_fields_are_the_public_contract() -> None:
    names = [f.name for f in fields(analytic.MMN)]
    assert names[:6] == ["rho", "p_wait", "lq", "l", "wq", "w"]
    assert [f.name for f in fields(analytic.MM1K)][:4] == ["p", "p_block", "l", "w"]
    assert [f.name for f in fields(analytic.Tandem)][:5] == ["lam2", "w1", "w2", "t", "l"]
    assert [f.name for f in fields(analytic.MVA)][:3] == ["x", "r", "q"]
    assert [f.name for f in fields(analytic.Availability)] == [
        "a", "gamma_eq", "tau_eq", "pi_up", "pi_pf", "pi_nf",
    ]  # fmt: skip
    r = analytic.mmn(1.0, 2.0, 1)
    with pytest.raises(FrozenInstanceError):
        r.w = 0.0  # type: ignore[misc]


def test_erlang_c_table_values() -> None:
    assert analytic.erlang_c(2, 1.0) == pytest.approx(1 / 3, rel=1e-14)  # classic table entry
    assert analytic.mmn(1.0, 1.0, 2).p_wait == pytest.approx(1 / 3, rel=1e-14)
    assert analytic.erlang_b(2, 1.0) == pytest.approx(0.2, rel=1e-14)  # (1/2)/(1+1+1/2)
    for n, a in [(3, F(2)), (5, F(7, 2)), (10, F(8)), (20, F(39, 2))]:
        assert analytic.erlang_c(n, float(a)) == pytest.approx(
            float(erlang_c_textbook(n, a)), rel=1e-12
        )


@pytest.mark.parametrize(("n", "a"), [(100, 80.0), (500, 490.0), (1000, 950.0), (1000, 999.0)])
def test_erlang_c_stable_for_many_servers(n: int, a: float) -> None:
    assert analytic.erlang_c(n, a) == pytest.approx(erlang_c_logspace(n, a), rel=1e-9)
    r = analytic.mmn(a, 1.0, n)
    assert math.isfinite(r.w) and 0 < r.p_wait < 1


def test_mmn_little_and_textbook_relations() -> None:
    lam, mu, n = 10.0, 4.0, 3
    c = float(erlang_c_textbook(n, F(5, 2)))
    r = analytic.mmn(lam, mu, n)
    assert r.wq == pytest.approx(c / (n * mu - lam), rel=1e-12)
    assert r.w == pytest.approx(c / (n * mu - lam) + 1 / mu, rel=1e-12)
    assert r.lq == pytest.approx(lam * r.wq, rel=1e-12)
    assert r.l == pytest.approx(r.lq + lam / mu, rel=1e-12)


def test_mmn_against_ciw_simulation() -> None:
    lam, mu, n = 2.4, 1.0, 3  # ρ = 0.8
    network = ciw.create_network(
        arrival_distributions=[ciw.dists.Exponential(rate=lam)],
        service_distributions=[ciw.dists.Exponential(rate=mu)],
        number_of_servers=[n],
    )
    means = []
    for seed in range(4):
        ciw.seed(seed)
        sim = ciw.Simulation(network)
        sim.simulate_until_max_time(6000)
        recs = [r for r in sim.get_all_records() if r.arrival_date > 500]
        means.append(np.mean([r.waiting_time + r.service_time for r in recs]))
    predicted = analytic.mmn(lam, mu, n).w  # 2.0787
    # one replication scatters ~2.5 % at this load, so the mean of 4 has SE ~1.2 %: 4 % is >3 SE
    assert np.mean(means) == pytest.approx(predicted, rel=0.04)


# --- M/M/1/K ---------------------------------------------------------------------------------


def test_mm1k_formula() -> None:
    lam, mu, k = 1.0, 2.0, 3
    rho = lam / mu
    expected = [(1 - rho) * rho**i / (1 - rho ** (k + 1)) for i in range(k + 1)]
    r = analytic.mm1k(lam, mu, k)
    assert r.p == pytest.approx(expected, rel=1e-12)
    assert r.p_block == pytest.approx(expected[-1], rel=1e-12)  # 1/15
    assert r.p_block == pytest.approx(1 / 15, rel=1e-12)
    n_bar = sum(i * p for i, p in enumerate(expected))
    assert r.l == pytest.approx(n_bar, rel=1e-12)
    assert r.w == pytest.approx(n_bar / (lam * (1 - expected[-1])), rel=1e-12)


def test_mm1k_rho_one_and_overload() -> None:
    r = analytic.mm1k(3.0, 3.0, 4)
    assert r.p == pytest.approx([0.2] * 5, rel=1e-12)
    assert r.l == pytest.approx(2.0)  # k/2
    assert r.w == pytest.approx(2.0 / (3.0 * 0.8))
    # ρ = 3, k = 2: p ∝ 1, 3, 9
    over = analytic.mm1k(6.0, 2.0, 2)
    assert over.p == pytest.approx([1 / 13, 3 / 13, 9 / 13], rel=1e-12)
    # ρ near 1 from both sides: continuous through the limit
    for rho in (1 - 1e-9, 1 + 1e-9):
        assert analytic.mm1k(rho, 1.0, 4).p_block == pytest.approx(0.2, rel=1e-7)


@pytest.mark.parametrize(("lam", "mu", "k"), [(0.7, 1.0, 6), (5.0, 1.0, 40), (50.0, 1.0, 800)])
def test_mm1k_against_ctmc(lam: float, mu: float, k: int) -> None:
    pi = birth_death_stationary([lam] * k, [mu] * k)
    r = analytic.mm1k(lam, mu, k)
    assert np.allclose(r.p, pi, rtol=1e-8, atol=1e-14)
    assert all(math.isfinite(x) for x in r.p)  # ρ^{k+1} = 50^801 would overflow naively


def test_mm1k_large_k_approaches_mm1() -> None:
    assert analytic.mm1k(1.0, 2.0, 200).l == pytest.approx(analytic.mmn(1.0, 2.0, 1).l, rel=1e-12)


def test_mm1k_idle() -> None:
    r = analytic.mm1k(0.0, 2.0, 3)
    assert r.p == (1.0, 0.0, 0.0, 0.0) and r.p_block == 0.0 and r.w == 0.5


# --- Jackson tandem with retries (§4) ---------------------------------------------------------


def test_tandem_by_hand() -> None:
    lam, mu1, n1, mu2, n2, d, vt = 10.0, 4.0, 3, 5.0, 3, 0.01, 2.0
    w1 = float(erlang_c_textbook(3, F(5, 2))) / (12 - 10) + 1 / 4
    for p in (0.9, 0.8):
        lam2 = lam / p
        w2 = float(erlang_c_textbook(3, F(lam2).limit_denominator() / 5)) / (15 - lam2) + 1 / 5
        t = w1 + 2 * d + w2 / p + (1 - p) / p * vt
        r = analytic.jackson_tandem(lam, mu1, n1, mu2, n2, p=p, d=d, vt=vt)
        assert r.lam2 == pytest.approx(lam2, rel=1e-12)
        assert (r.w1, r.w2) == pytest.approx((w1, w2), rel=1e-9)
        assert r.t == pytest.approx(t, rel=1e-9)
        assert r.l == pytest.approx(lam * t, rel=1e-9)
    # p = 0.9 by hand: W1 = 0.6011, W2 = 0.3423 → T = 0.6011 + 0.02 + 0.3804 + 0.2222 = 1.2237
    r = analytic.jackson_tandem(lam, mu1, n1, mu2, n2, p=0.9, d=d, vt=vt)
    assert r.t == pytest.approx(1.2237, abs=1e-4)


def test_tandem_without_retries_is_two_mmn_stations() -> None:
    r = analytic.jackson_tandem(3.0, 4.0, 1, 5.0, 1)
    assert r.t == pytest.approx(1 / (4 - 3) + 1 / (5 - 3), rel=1e-12)


def test_tandem_against_ciw_with_visibility_timeout() -> None:
    """Sender M/M/2, broker M/M/2, failed attempts (1 − p) wait VT in a delay node, retry."""
    lam, mu1, n1, mu2, n2, p, vt = 4.8, 4.0, 2, 5.0, 2, 0.8, 1.5
    network = ciw.create_network(
        arrival_distributions=[ciw.dists.Exponential(rate=lam), None, None],
        service_distributions=[
            ciw.dists.Exponential(rate=mu1),
            ciw.dists.Exponential(rate=mu2),
            ciw.dists.Deterministic(value=vt),
        ],
        number_of_servers=[n1, n2, float("inf")],
        routing=[[0.0, 1.0, 0.0], [0.0, 0.0, 1 - p], [0.0, 1.0, 0.0]],
    )
    means = []
    for seed in range(4):
        ciw.seed(seed)
        sim = ciw.Simulation(network)
        sim.simulate_until_max_time(2500)
        first: dict[int, float] = {}
        done: dict[int, float] = {}
        for rec in sim.get_all_records():
            first[rec.id_number] = min(first.get(rec.id_number, math.inf), rec.arrival_date)
            if rec.destination == -1:
                done[rec.id_number] = rec.exit_date
        means.append(np.mean([done[i] - first[i] for i in done if first[i] > 200]))
    predicted = analytic.jackson_tandem(lam, mu1, n1, mu2, n2, p=p, vt=vt).t  # 1.15625
    # one replication scatters ~3.8 %, so the mean of 4 has SE ~1.9 %: 5 % is ~2.6 SE. (Over 16
    # other seeds the simulated mean was 1.1570 ± 0.0051, i.e. the formula is exact here.)
    assert np.mean(means) == pytest.approx(predicted, rel=0.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(lam=37.5, mu1=100, n1=1, mu2=10, n2=4, p=0.9), "λ/p = 41.67 ≥ n2·μ2 = 40"),
        (dict(lam=12, mu1=4, n1=3, mu2=100, n2=1), "λ = 12 ≥ n1·μ1 = 12"),
        (dict(lam=1, mu1=4, n1=3, mu2=5, n2=1, p=0.0), "p must be in (0, 1], got 0.0"),
        (dict(lam=1, mu1=4, n1=3, mu2=5, n2=1, vt=-1.0), "got -1.0"),
        (dict(lam=1, mu1=4, n1=0, mu2=5, n2=1), "n1 must be an integer ≥ 1, got 0"),
    ],
)
def test_tandem_errors(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError) as info:
        analytic.jackson_tandem(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_mmn_errors() -> None:
    with pytest.raises(ValueError, match=r"ρ = λ/\(nμ\) = 1.05 ≥ 1"):
        analytic.mmn(2.1, 1.0, 2)
    with pytest.raises(ValueError, match="ρ = λ/\\(nμ\\) = 1 ≥ 1"):
        analytic.mmn(2.0, 1.0, 2)
    with pytest.raises(ValueError, match="got -1"):
        analytic.mmn(1.0, -1.0, 2)
    with pytest.raises(ValueError, match="got 2.5"):
        analytic.mm1k(1.0, 1.0, 2.5)  # type: ignore[arg-type]


# --- MVA (§5) --------------------------------------------------------------------------------


def test_mva_hand_iteration() -> None:
    # D = 1, Z = 2. Q0 = 0; R1 = 1, X1 = 1/3, Q1 = 1/3; R2 = 4/3, X2 = 2/(10/3) = 0.6, Q2 = 0.8;
    # R3 = 1.8, X3 = 3/3.8, Q3 = 1.8·3/3.8
    expected = [(1 / 3, 1.0, 1 / 3), (0.6, 4 / 3, 0.8), (3 / 3.8, 1.8, 5.4 / 3.8)]
    for n, (x, r, q) in enumerate(expected, start=1):
        res = analytic.mva_closed(n, 2.0, 1.0)
        assert (res.x, res.r, res.q) == pytest.approx((x, r, q), rel=1e-12)
        assert res.n_star == pytest.approx(3.0)


def test_mva_matches_machine_repairman() -> None:
    """Exact finite-source M/M/1//N: P(k at the centre) ∝ N!/(N−k)! (D/Z)ᵏ, X = (1 − P0)/D."""
    n, z, d = 10, F(3), F(1, 2)
    terms = [F(math.factorial(n), math.factorial(n - k)) * (d / z) ** k for k in range(n + 1)]
    p0 = terms[0] / sum(terms)
    x = (1 - p0) / d
    res = analytic.mva_closed(n, float(z), float(d))
    assert res.x == pytest.approx(float(x), rel=1e-12)
    assert res.r == pytest.approx(float(n / x - z), rel=1e-12)  # Little on the whole loop


def test_mva_asymptotes() -> None:
    d, z = 0.01, 0.09  # N* = 10
    assert analytic.saturation_point(z, d) == pytest.approx(10.0)
    light = analytic.mva_closed(1, z, d)
    assert light.x == pytest.approx(1 / (d + z)) and light.r == pytest.approx(d)
    heavy = analytic.mva_closed(400, z, d)
    assert heavy.x == pytest.approx(1 / d, rel=1e-9)
    assert heavy.r == pytest.approx(400 * d - z, rel=1e-9)
    curve = analytic.mva_curve(40, z, d)
    xs = [c.x for c in curve]
    assert all(b > a for a, b in zip(xs, xs[1:], strict=False))
    assert all(c.x <= min(c.n / (d + z), 1 / d) + 1e-12 for c in curve)  # below both bounds
    with pytest.raises(ValueError, match="got 0"):
        analytic.mva_closed(0, z, d)


# --- availability and loss (§6) --------------------------------------------------------------


def test_availability_by_hand_and_ctmc() -> None:
    gp, gn, tp, tn, c = 0.01, 0.001, 1.0, 0.1, 0.9
    # π_UP = 1/(1 + 0.01 + (0.001 + 0.001)/0.1) = 1/1.03
    r = analytic.availability(gp, gn, tp, tn, c)
    assert r.pi_up == pytest.approx(1 / 1.03, rel=1e-12)
    assert r.pi_pf == pytest.approx(0.01 / 1.03, rel=1e-12)
    assert r.pi_nf == pytest.approx(0.02 / 1.03, rel=1e-12)
    assert r.gamma_eq == pytest.approx(0.011)
    # τ_eq = (0.01·0.9·1 + 0.02·0.1)/(0.01 + 0.02) = 0.011/0.03
    assert r.tau_eq == pytest.approx(0.011 / 0.03, rel=1e-12)
    # the CTMC solved numerically: states UP, PF, NF
    q = np.array(
        [
            [-(gp + gn), gp, gn],
            [c * tp, -tp, (1 - c) * tp],
            [tn, 0.0, -tn],
        ]
    )
    a = np.vstack([q.T, np.ones(3)])
    pi = np.linalg.lstsq(a, np.array([0.0, 0.0, 0.0, 1.0]), rcond=None)[0]
    assert (r.pi_up, r.pi_pf, r.pi_nf) == pytest.approx(tuple(pi), rel=1e-10)
    assert r.a == pytest.approx(pi[0], rel=1e-12)  # two-state equivalent keeps availability


def test_availability_limits() -> None:
    never = analytic.availability(0.0, 0.0, 1.0, 1.0, 0.5)
    assert never.a == 1.0 and never.tau_eq == math.inf
    # c = 1, no node failures: a plain two-state process, A = τp/(γp + τp)
    r = analytic.availability(0.2, 0.0, 1.8, 5.0, 1.0)
    assert r.a == pytest.approx(0.9) and r.tau_eq == pytest.approx(1.8)
    with pytest.raises(ValueError, match="got 1.5"):
        analytic.availability(0.1, 0.1, 1.0, 1.0, 1.5)


# small case: λ = 1, μ = 2, k = 2 → p = (4/7, 2/7, 1/7), N̄ = 4/7
LAM, MU, K = 1.0, 2.0, 2
P = (4 / 7, 2 / 7, 1 / 7)
NBAR = 4 / 7
AS, AM, AC, GM, GC, TC = 0.99, 0.98, 0.97, 0.01, 0.02, 0.5


def test_loss_rate_by_hand() -> None:
    up = AS * AM * AC
    fill = LAM / (LAM + TC)  # 2/3
    overflow = fill**2 * P[0] + fill * P[1] + P[2]
    be = up * GM * NBAR + AS * (1 - AM) * AC * LAM + up * GC * NBAR
    be += AS * AM * (1 - AC) * LAM + up * LAM * P[2]
    pc = up * GM * NBAR + AS * (1 - AM) * AC * LAM
    pc += AS * AM * (1 - AC) * LAM * overflow + up * LAM * P[2]
    pcm = AS * (1 - AM) * AC * LAM + AS * AM * (1 - AC) * LAM * overflow + up * LAM * P[2]
    args = (LAM, MU, K, AS, AM, AC, GM, GC, TC)
    assert analytic.loss_rate("BE", *args) == pytest.approx(be, rel=1e-12)
    assert analytic.loss_rate("PC", *args) == pytest.approx(pc, rel=1e-12)
    assert analytic.loss_rate("PCM", *args) == pytest.approx(pcm, rel=1e-12)
    assert analytic.loss_rate("BE", *args) > analytic.loss_rate("PC", *args)
    assert analytic.loss_rate("PC", *args) > analytic.loss_rate("PCM", *args)
    parts = analytic.loss_breakdown("pc", *args)
    assert parts.total == pytest.approx(pc, rel=1e-12) and parts.consumer_crash == 0.0


@pytest.mark.parametrize("qos", ["BE", "PC", "PCM"])
def test_loss_rate_all_available_is_only_blocking(qos: str) -> None:
    blocking = LAM * P[2]  # λ·p_k = 1/7
    assert analytic.loss_rate(qos, LAM, MU, K, 1, 1, 1, 0, 0, math.inf) == pytest.approx(blocking)
    assert analytic.loss_rate(qos, LAM, MU, K, 1, 1, 1, 0, 0, 1.0) == pytest.approx(blocking)


def test_loss_rate_limits() -> None:
    # supplier never up: nothing is sent, nothing is lost
    assert analytic.loss_rate("BE", LAM, MU, K, 0, 0.9, 0.9, 0.1, 0.1, 1) == 0.0
    # broker always down: every message is lost, whatever the QoS
    for qos in ("BE", "PC", "PCM"):
        assert analytic.loss_rate(qos, LAM, MU, K, 1, 0, 1, 0.1, 0.1, 1) == pytest.approx(LAM)
    # consumer always down with PC/PCM and an instant consumer restart: only overflow p_k
    pcm = analytic.loss_rate("PCM", LAM, MU, K, 1, 1, 0, 0, 0, math.inf)
    assert pcm == pytest.approx(LAM * P[2])


def test_loss_rate_errors() -> None:
    with pytest.raises(ValueError, match="'XYZ'"):
        analytic.loss_rate("XYZ", LAM, MU, K, AS, AM, AC, GM, GC, TC)
    with pytest.raises(ValueError, match="A_M must be in \\[0, 1\\], got 1.2"):
        analytic.loss_rate("BE", LAM, MU, K, AS, 1.2, AC, GM, GC, TC)


# --- elastic pool and HPA (§7, §8) -----------------------------------------------------------


def test_npp() -> None:
    assert analytic.npp(10.0, 60.0, 100.0) == 6  # 10 msg/s² × 60 s / 100 msg/s
    assert analytic.npp(5.0, 90.0, 100.0) == 5  # 4.5 → 5
    assert analytic.npp(0.1, 30.0, 1.0) == 3  # 0.1·30 = 3.0000000000000004 in floating point
    assert analytic.npp(0.0, 60.0, 100.0) == 0
    with pytest.raises(ValueError, match="got 0"):
        analytic.npp(1.0, 60.0, 0.0)


def test_hpa_desired() -> None:
    # Kubernetes docs: metric 200m vs target 100m doubles; 50m halves
    assert analytic.hpa_desired(3, 200.0, 100.0) == 6
    assert analytic.hpa_desired(6, 50.0, 100.0) == 3
    assert analytic.hpa_desired(4, 105.0, 100.0) == 4  # within ±10 %: no change
    assert analytic.hpa_desired(4, 91.0, 100.0) == 4
    assert analytic.hpa_desired(4, 111.0, 100.0) == 5  # ceil(4.44)
    assert analytic.hpa_desired(10, 0.0, 100.0) == 0
    assert analytic.hpa_desired(0, 5.0, 100.0) == 1  # KEDA activation
    assert analytic.hpa_desired(0, 0.0, 100.0) == 0
    assert analytic.hpa_desired(5, 120.0, 100.0, tolerance=0.25) == 5
    # exactly at the tolerance's edge nothing changes (55 / 50 - 1 rounds above 0.1 as a float)
    assert analytic.hpa_desired(1, 55.0, 50.0) == 1
    assert analytic.hpa_desired(1, 45.0, 50.0) == 1
    assert analytic.hpa_desired(1, 55.01, 50.0) == 2
    assert analytic.hpa_desired(10, 110.0, 100.0) == 10
    with pytest.raises(ValueError, match="got -1"):
        analytic.hpa_desired(-1, 1.0, 1.0)
