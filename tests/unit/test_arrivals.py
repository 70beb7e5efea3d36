"""Open-loop arrival schedules (docs/models.md §1): laws, rates, boundaries, determinism.

Statistical checks use tolerances derived from the sampling error of the statistic (k standard
errors with k = 5: a seeded test that fails is a real change, not bad luck).
"""

from __future__ import annotations

import math
from itertools import islice

import numpy as np
import pytest

from testbed.core.arrivals import rate_function, schedule, think_times
from testbed.core.scenario import (
    ClosedArrival,
    ConstantArrival,
    MmppArrival,
    PoissonArrival,
    RampArrival,
    StepsArrival,
    TraceArrival,
)

K = 5.0  # standard errors allowed


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def times(
    arrival: object, stop: float, start: float = 0.0, seed: int = 7, **kw: object
) -> np.ndarray:
    return np.fromiter(schedule(arrival, rng(seed), start, stop, **kw), dtype=float)


def test_poisson_gaps_are_exponential_with_the_rate() -> None:
    t = times(PoissonArrival(kind="poisson", rate=200.0), stop=200.0)
    gaps = np.diff(t)
    n = len(gaps)
    assert abs(gaps.mean() - 1 / 200) < K * (1 / 200) / math.sqrt(n)
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1.0) < K / math.sqrt(n)  # sd of the sample cv of an exponential ~ 1/√n
    assert abs(len(t) - 200 * 200) < K * math.sqrt(200 * 200)


def test_times_are_sorted_and_inside_start_stop() -> None:
    for arrival in (
        PoissonArrival(kind="poisson", rate=50.0),
        ConstantArrival(kind="constant", rate=50.0),
        RampArrival.model_validate({"kind": "ramp", "from": 0, "to": 100, "over": 5}),
    ):
        t = times(arrival, start=3.0, stop=13.0)
        assert len(t) > 0
        assert t[0] >= 3.0 and t[-1] < 13.0
        assert np.all(np.diff(t) >= 0)


def test_constant_spacing_phase_and_count() -> None:
    t = times(ConstantArrival(kind="constant", rate=100.0), start=1.0, stop=2.0, phase=0.0)
    assert len(t) == 100
    assert t[0] == 1.0
    assert np.allclose(np.diff(t), 0.01)
    shifted = times(ConstantArrival(kind="constant", rate=100.0), start=1.0, stop=2.0, phase=0.5)
    assert shifted[0] == pytest.approx(1.005)
    drawn = times(ConstantArrival(kind="constant", rate=100.0), stop=1.0)
    assert 0.0 <= drawn[0] < 0.01  # a random phase by default, so instances do not lockstep


def test_mmpp_long_run_rate_is_sojourn_weighted() -> None:
    arr = MmppArrival(kind="mmpp", rates=[1000.0, 100.0], mean_sojourns=[0.5, 1.5])
    horizon = 400.0
    t = times(arr, stop=horizon)
    expected = (1000 * 0.5 + 100 * 1.5) / 2.0
    # the count's variance is dominated by the switching: Var ≈ 2·(r0−r1)²·T·(s0 s1)²/(s0+s1)³
    var = 2 * (1000 - 100) ** 2 * horizon * (0.5 * 1.5) ** 2 / (0.5 + 1.5) ** 3
    assert abs(len(t) - expected * horizon) < K * math.sqrt(var + expected * horizon)
    counts = np.histogram(t, bins=np.arange(0, horizon + 0.25, 0.25))[0]
    assert counts.max() > 3 * counts.mean() / 1.5 and counts.min() < counts.mean() / 2  # bursty


def test_ramp_poisson_counts_follow_the_integrated_rate() -> None:
    arr = RampArrival.model_validate({"kind": "ramp", "from": 0, "to": 2000, "over": 10})
    t = times(arr, stop=15.0)
    edges = np.arange(0, 15.5, 1.0)
    counts = np.histogram(t, bins=edges)[0]
    rf = rate_function(arr)
    for i, c in enumerate(counts):
        a, b = edges[i], edges[i + 1]
        expected = (rf.rate(a) + rf.rate(b)) / 2 * (b - a) if b <= 10 else 2000.0
        assert abs(c - expected) < K * math.sqrt(expected) + 1


def test_ramp_constant_spacing_tracks_the_rate() -> None:
    arr = RampArrival.model_validate(
        {"kind": "ramp", "from": 100, "to": 1000, "over": 10, "process": "constant"}
    )
    t = times(arr, stop=12.0, phase=0.0)
    rf = rate_function(arr)
    mids = (t[1:] + t[:-1]) / 2
    gaps = np.diff(t)
    assert np.allclose(gaps, [1 / rf.rate(m) for m in mids], rtol=1e-3)
    total = (100 + 1000) / 2 * 10 + 1000 * 2
    assert abs(len(t) - total) <= 1


def test_steps_rate_zero_before_first_step_and_exact_counts() -> None:
    arr = StepsArrival.model_validate(
        {
            "kind": "steps",
            "process": "constant",
            "steps": [{"at": 2, "rate": 10}, {"at": 4, "rate": 0}, {"at": 6, "rate": 50}],
        }
    )
    t = times(arr, stop=8.0, phase=0.0)
    assert t[0] >= 2.0
    assert np.count_nonzero((t >= 2) & (t < 4)) == 20
    assert np.count_nonzero((t >= 4) & (t < 6)) == 0
    assert np.count_nonzero(t >= 6) == pytest.approx(100, abs=1)
    poisson = StepsArrival.model_validate(
        {"kind": "steps", "steps": [{"at": 0, "rate": 500}, {"at": 10, "rate": 0}]}
    )
    tp = times(poisson, stop=100.0)
    assert tp[-1] < 10.0
    assert abs(len(tp) - 5000) < K * math.sqrt(5000)


def test_rate_function_inverse_inverts_the_cumulative() -> None:
    arr = StepsArrival.model_validate(
        {"kind": "steps", "steps": [{"at": 1, "rate": 3}, {"at": 2, "rate": 7}]}
    )
    rf = rate_function(arr)
    x = np.linspace(0.01, 20, 500)
    tau = rf.inverse(x)
    # Λ(τ) by numeric integration of the rate
    grid = np.linspace(0, tau.max(), 200_001)
    lam = np.cumsum([rf.rate(g) for g in grid]) * (grid[1] - grid[0])
    assert np.allclose(np.interp(tau, grid, lam), x, atol=0.01)


def test_trace_replays_offsets_and_loops_with_its_period() -> None:
    arr = TraceArrival(kind="trace", file="t.csv", times=[0.0, 0.5, 1.0])
    assert times(arr, start=2.0, stop=100.0).tolist() == [2.0, 2.5, 3.0]
    looping = TraceArrival(kind="trace", file="t.csv", loop=True, times=[0.0, 0.5, 1.0])
    t = times(looping, stop=3.0)
    assert t.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]  # period = last + mean gap = 1.5
    with pytest.raises(ValueError, match="no loaded times"):
        list(schedule(TraceArrival(kind="trace", file="x.csv"), rng()))


def test_closed_loop_has_no_schedule_but_think_times() -> None:
    arr = ClosedArrival.model_validate(
        {"kind": "closed", "think_time": {"kind": "exponential", "mean": 0.1}}
    )
    with pytest.raises(ValueError, match="closed-loop"):
        schedule(arr, rng())
    draw = think_times(arr, rng())
    x = np.array([draw() for _ in range(20_000)])
    assert abs(x.mean() - 0.1) < K * 0.1 / math.sqrt(len(x))


def test_same_seed_same_schedule_other_seed_other_schedule() -> None:
    arr = PoissonArrival(kind="poisson", rate=10.0)
    a = list(islice(schedule(arr, rng(1)), 100))
    b = list(islice(schedule(arr, rng(1)), 100))
    c = list(islice(schedule(arr, rng(2)), 100))
    assert a == b and a != c


def test_empty_window_and_bad_arguments() -> None:
    arr = PoissonArrival(kind="poisson", rate=10.0)
    assert list(schedule(arr, rng(), start=5.0, stop=5.0)) == []
    with pytest.raises(ValueError, match="start"):
        schedule(arr, rng(), start=-1.0)
    with pytest.raises(ValueError, match="phase"):
        list(schedule(ConstantArrival(kind="constant", rate=1.0), rng(), stop=2.0, phase=1.5))


PAIRED = """
name: paired
seed: 11
duration: 5s
topology: {queues: [{name: q}]}
producers:
  - {name: a, queue: q, count: 2, arrival: {kind: poisson, rate: 40/s}}
consumers:
  - {name: c, queue: q, service_time: 1ms}
"""


@pytest.mark.parametrize("replication", [0, 2])
def test_the_simulator_sends_on_the_live_schedule_of_its_replication(replication: int) -> None:
    """Replication r of a prediction sends at the intended times live replication r draws
    (`testbed.core.seeds.arrival_rng`, which `testbed.workload.users` hands every live
    producer instance): common random numbers, so a throughput compared between the two is
    not two draws of the Poisson count apart. A second group leaves the first one's times."""
    from emulator.sim.model import Model
    from testbed.core.profile import Profile
    from testbed.core.scenario_loader import parse_scenario
    from testbed.core.seeds import arrival_rng, replication_seed

    def intended(text: str) -> dict[str, list[float]]:
        s, issues = parse_scenario(text)
        assert s is not None, issues
        m = Model(s, Profile.zero(), replication).run().tables["messages"].to_pandas()
        return {str(p): sorted(g.t_intended) for p, g in m.groupby("producer")}

    got = intended(PAIRED)
    seed = replication_seed(11, replication)
    for i in range(2):
        live = list(
            schedule(PoissonArrival(kind="poisson", rate=40.0), arrival_rng(seed, "a", i), 0.0, 5.0)
        )
        assert got[f"a-{i}"] == pytest.approx(live, abs=1e-12)
    assert got["a-0"] != got["a-1"]
    more = PAIRED.replace(
        "consumers:", "  - {name: b, queue: q, arrival: {kind: poisson, rate: 10/s}}\nconsumers:"
    )
    assert intended(more)["a-0"] == got["a-0"]
