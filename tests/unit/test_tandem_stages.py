"""Per-stage thread counts of the `threads` model (docs/models.md §3a, §4): the tandem with
N1 ≠ N2 and visibility-timeout retries, simulated against the closed form, and the old single
count still meaning both stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator import analytic
from emulator.closed_form import analytic_figures
from emulator.sim.broker import ThreadsBroker
from emulator.sim.model import Model
from testbed.core.profile import Profile, default_profile
from testbed.core.scenario_loader import load_scenario
from testbed.core.threads import StageThreads, stage_counts
from tests.unit.test_sim import assert_in_ci, joined, runs, scenario

LAM, D, VT = 50.0, 0.002, 0.1
LIB = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def _tandem(n1: int, n2: int, p: float, threads: str | None = None) -> object:
    return scenario(f"""
name: tandem
seed: 5
duration: 600s
warmup: 20s
broker: {{model: threads, threads: {threads or f"{{receive: {n1}, dispatch: {n2}}}"}}}
topology:
  queues:
    - {{name: q, visibility: {{timeout: {VT}s, max_deliveries: 1000}}}}
producers:
  - {{name: p, queue: q, arrival: {{kind: poisson, rate: {LAM}}}}}
consumers:
  - {{name: c, queue: q, count: 2, prefetch: 0, failure_probability: {1 - p}}}
""")


def _profile(mu1: float, mu2: float) -> Profile:
    return Profile.zero(
        kind="activemq",
        network_delay=D,
        threads={
            "receive": {"mean": 1 / mu1, "sd": 1 / mu1},
            "dispatch": {"mean": 1 / mu2, "sd": 1 / mu2},
        },
    )


# (N1, μ1, N2, μ2, p): each case's T differs from the same-N tandems by more than the
# simulation's interval (or those are unstable), so one count for both stages fails it
CASES = [(1, 80.0, 3, 25.0, 0.8), (3, 25.0, 1, 80.0, 0.9), (2, 40.0, 4, 20.0, 0.8)]


@pytest.mark.parametrize(("n1", "mu1", "n2", "mu2", "p"), CASES)
def test_n1_ne_n2_tandem_with_retries_matches_the_closed_form(
    n1: int, mu1: float, n2: int, mu2: float, p: float
) -> None:
    s = _tandem(n1, n2, p)
    prof = _profile(mu1, mu2)
    theory = analytic.jackson_tandem(LAM, mu1, n1, mu2, n2, p=p, d=D, vt=VT)
    # the analytic prediction of the scenario is that formula (consumers are sinks)
    figures = analytic_figures(s, prof)  # type: ignore[arg-type]
    assert figures[("latency_mean_s", None, None)] == pytest.approx(theory.t, rel=1e-9)
    res = runs(s, prof, 8)
    t = [float(joined(r).latency_s.mean()) for r in res]
    assert_in_ci(theory.t, t, f"tandem T, N1={n1} N2={n2} p={p}")
    attempts = [r.tables["deliveries"].num_rows / max(r.ledger.delivered_unique, 1) for r in res]
    assert_in_ci(1 / p, attempts, "attempts per message = 1/p")


def test_a_single_count_still_means_both_stages() -> None:
    assert stage_counts(3) == (3, 3)
    assert stage_counts(StageThreads(receive=2, dispatch=5)) == (2, 5)
    for text, want in (("3", (3, 3)), ("{receive: 2, dispatch: 5}", (2, 5))):
        s = _tandem(0, 0, 0.9, threads=text)
        model = Model(s, _profile(80.0, 80.0), 0)  # type: ignore[arg-type]
        assert isinstance(model.broker, ThreadsBroker)
        assert (len(model.broker.receive_free), len(model.broker.dispatch_free)) == want


def test_library_tandem_scenario_is_the_closed_form() -> None:
    s = load_scenario(LIB / "tandem-n1-1-n2-3.yaml")
    assert stage_counts(s.broker.threads) == (1, 3)
    prof = default_profile("activemq")
    mu = 1 / float(prof.threads.receive.mean)
    want = analytic.jackson_tandem(50.0, mu, 1, mu, 3, p=0.8, d=prof.network_delay, vt=0.1)
    assert analytic_figures(s, prof)[("latency_mean_s", None, None)] == pytest.approx(want.t)
