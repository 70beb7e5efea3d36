"""A restarted broker's slow first seconds (testbed.calibration.cold_start, docs/models.md §6):
the fit recovers a known decay from noisy deliveries, and the simulator adds it after each
simulated restart, and only then."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.sim.model import Model
from testbed.calibration.cold_start import RATE, STREAM_S, fit_cold
from testbed.core.profile import ColdStart, Profile, RestartTime
from testbed.core.scenario_loader import parse_scenario


def _stream(extra: float, tau: float, seed: int, start: float = 0.4) -> list[tuple[float, float]]:
    """A calibration stream after a restart: 1.1 ms at the median with lognormal noise, a few
    stalls, plus the cold decay."""
    rng = np.random.default_rng(seed)
    n = int(STREAM_S * RATE)
    t = start + np.arange(n) / RATE
    lat = 1.1e-3 * rng.lognormal(0.0, 0.15, n) + extra * np.exp(-t / tau)
    lat[rng.choice(n, 5, replace=False)] += 0.05  # write stalls
    return list(zip(t.tolist(), lat.tolist(), strict=True))


@pytest.mark.parametrize(("extra", "tau"), [(1.0e-3, 3.0), (2.0e-3, 1.0)])
def test_the_fit_recovers_a_known_decay(extra: float, tau: float) -> None:
    cold = fit_cold([_stream(extra, tau, 1), _stream(extra, tau, 2)])
    assert cold is not None and cold.rate == RATE
    assert cold.extra_s == pytest.approx(extra, rel=0.3)
    assert cold.tau_s == pytest.approx(tau, rel=0.35)


def test_a_broker_without_a_slow_start_gets_none() -> None:
    cold = fit_cold([_stream(0.0, 1.0, 3), _stream(0.0, 1.0, 4)])
    assert cold is not None
    assert cold.at(0.5) < 0.1e-3  # noise, not a tenth of a millisecond of warm-up
    assert fit_cold([]) is None and fit_cold([_stream(1e-3, 1.0, 5)[:30]]) is None


KILL = """
name: cold
seed: 3
duration: 20s
drain_timeout: 10s
broker: {kind: activemq}
topology:
  queues: [{name: q, durable: true}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 50/s}, size: 100B, persistent: true}
consumers:
  - {name: c, queue: q, prefetch: 10, service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: broker_kill, at: 5s, duration: 0s}
"""


def _latencies(cold: ColdStart | None) -> tuple[np.ndarray, np.ndarray, float]:
    """(publish times, latencies) of first deliveries, and when the broker was up again."""
    s, issues = parse_scenario(KILL)
    assert s is not None, [str(i) for i in issues]
    rt = RestartTime(mean=2.0, kill_s=0.0, cold=cold)
    res = Model(s, Profile.zero().model_copy(update={"restart_time": rt}), 0).run()
    d = res.tables["deliveries"].to_pandas()
    ev = res.tables["events"].to_pandas()
    up = float(ev[ev.kind == "broker_up"].t.iloc[0])
    first = d[d.attempt == 1]
    sent = first.t_deliver - first.latency_s
    return sent.to_numpy(), first.latency_s.to_numpy(), up


def test_the_simulator_adds_the_slow_start_after_a_restart_only() -> None:
    cold = ColdStart(extra_s=2e-3, tau_s=1.0, rate=RATE)
    t, lat, up = _latencies(cold)
    t0, lat0, up0 = _latencies(None)
    assert up == up0 and np.array_equal(t, t0)
    extra = lat - lat0
    before = t < 5.0
    assert before.sum() > 200 and np.allclose(extra[before], 0.0, atol=1e-9)
    after = t >= up
    assert after.sum() > 200
    expected = np.array([cold.at(x - up) for x in t[after]])
    assert np.allclose(extra[after], expected, atol=1e-6)
    assert extra[after].max() > 0.5e-3  # the first deliveries after the clients are back are slow
    late = t > up + 8 * cold.tau_s
    assert late.any() and np.allclose(extra[late], 0.0, atol=1e-9)
    assert cold.at(-0.1) == 0.0 and cold.at(0.0) == pytest.approx(2e-3)
    assert math.isclose(cold.at(1.0), 2e-3 / math.e)
