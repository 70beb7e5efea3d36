"""The delivery to a consumer by its own idle time (`testbed.calibration.consumer_idle`,
`ClientPath.consumer_idle`, the simulator's `idle_scaler`).

Measured on the ActiveMQ quickstart (2026-11-27; consumers busy half of the time), a message
reached a consumer that had finished its previous one within 2 ms in a median 0.49 ms and one
idle for 20-50 ms in 0.84 ms; the simulator drew 0.78 ms for both. Calibration measures the
factor per idle bin and stores its tables for a cold consumer; the simulator scales each draw by
the consumer's idle time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sim.model import Model
from testbed.calibration.consumer_idle import MIN_BIN, consumer_idle, idle_points, normalised
from testbed.core.consumer_idle import IDLE_COLD, IdlePoint, idle_curve, idle_factor, idle_scaler
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import parse_scenario
from tests.unit.pathkit import one_table_path


def _factor(idle: np.ndarray) -> np.ndarray:
    """A consumer 0.6 times as slow within 2 ms, rising linearly to 1 at 20 ms."""
    return np.where(idle <= 0.002, 0.6, np.minimum(1.0, 0.6 + 0.4 * (idle - 0.002) / 0.018))


def _streams(
    rng: np.random.Generator, n: int = 3000, rate: float = 40.0
) -> tuple[pd.DataFrame, pd.Series]:
    """Two streams of one consumer each, 0.5 and 0.9 ms levels for a cold consumer, Poisson
    at ``rate`` msg/s, each handler ending 0.1 ms after its start; delay = level × factor × noise."""
    frames = []
    for name, level in (("s", 0.0005), ("l", 0.0009)):
        t = np.cumsum(rng.exponential(1 / rate, n))
        delay = np.empty(n)
        last_done = -1.0
        for i, ti in enumerate(t):
            delay[i] = level * _factor(np.array(ti - last_done))[()] * rng.lognormal(0, 0.15)
            last_done = ti + delay[i] + 0.0001
        frames.append(
            pd.DataFrame(
                {
                    "consumer": name,
                    "queue": name,
                    "t_deliver": t + delay,
                    "t_done": t + delay + 0.0001,
                    "latency_s": delay,
                }
            )  # fmt: skip
        )
    d = pd.concat(frames, ignore_index=True)
    return d, d.queue.astype(object)


def test_the_consumer_idle_is_the_time_from_its_previous_end_to_the_publish() -> None:
    d = pd.DataFrame(
        {"consumer": ["a", "b", "a", "a"], "t_deliver": [1.0, 1.0, 1.5, 1.502],
         "t_done": [1.1, 1.05, 1.6, 1.7], "latency_s": [0.001, 0.001, 0.001, 0.001]}
    )  # fmt: skip
    idle = consumer_idle(d)
    assert np.isnan(idle[0]) and np.isnan(idle[1])  # first of each consumer
    assert idle[2] == pytest.approx(1.499 - 1.1)
    assert idle[3] == pytest.approx(1.501 - 1.6)  # negative: the consumer was still busy


def test_the_points_recover_the_factor_whatever_the_streams_levels() -> None:
    """The two streams differ by 1.8× in level; compared within each stream, the bins give the
    factor back (the cold reference is 1 by construction)."""
    d, group = _streams(np.random.default_rng(1))
    points = idle_points(d, group, pd.Series(100.0, index=d.index))
    assert {p.rate for p in points} == {100.0}
    assert [p.idle for p in points] == sorted(p.idle for p in points)
    assert all(p.n >= MIN_BIN for p in points)
    assert [p.factor for p in points] == sorted(p.factor for p in points)
    for p in points:
        assert p.factor == pytest.approx(float(_factor(np.array(p.idle))), abs=0.06), p
    assert points[0].factor == pytest.approx(0.6, abs=0.05)


def test_without_enough_cold_deliveries_there_is_no_curve() -> None:
    """At 1,000 msg/s a consumer is never idle for 20 ms: no reference to compare with."""
    d, group = _streams(np.random.default_rng(2), n=2000, rate=1000.0)
    assert consumer_idle(d).max() < IDLE_COLD
    assert idle_points(d, group, pd.Series(100.0, index=d.index)) == []


def test_normalised_delays_are_the_cold_consumers() -> None:
    """Divided by the factor of its idle time, a stream's delays no longer depend on it."""
    d, group = _streams(np.random.default_rng(3))
    points = idle_points(d, group, pd.Series(100.0, index=d.index))
    s = d[d.queue == "s"]
    idle = consumer_idle(d)[s.index].to_numpy()
    cold = normalised(s.latency_s.to_numpy(), idle, points, 100.0)
    warm, rest = idle < 0.002, idle >= IDLE_COLD
    assert np.median(s.latency_s.to_numpy()[warm]) < 0.7 * np.median(cold[rest])
    assert np.median(cold[warm]) == pytest.approx(np.median(cold[rest]), rel=0.08)
    assert np.array_equal(normalised(cold, idle, [], 100.0), cold)  # no points: unchanged


def _pts(rate: float, f0: float, f1: float) -> list[IdlePoint]:
    return [IdlePoint(rate=rate, idle=0.001, factor=f0, n=50),
            IdlePoint(rate=rate, idle=0.01, factor=f1, n=50)]  # fmt: skip


def test_the_curve_interpolates_in_idle_and_in_log_rate_and_clamps() -> None:
    pts = _pts(100, 0.6, 0.8) + _pts(400, 0.9, 0.95)
    low = idle_curve(pts, 50)
    assert low == [(0.001, 0.6), (0.01, 0.8)]  # clamped below the lowest rate
    assert idle_factor(low, -0.003) == 0.6  # still busy: the shortest bin's
    assert idle_factor(low, 0.0055) == pytest.approx(0.7)
    assert idle_factor(low, 0.015) == pytest.approx(0.9)  # on to 1 at IDLE_COLD
    assert idle_factor(low, 5.0) == 1.0
    mid = idle_curve(pts, 200)  # halfway in log(rate)
    assert idle_factor(mid, 0.001) == pytest.approx(0.75)
    assert idle_curve(pts, 1000) == [(0.001, 0.9), (0.01, 0.95)]
    assert idle_curve([], 100) == [] and idle_factor([], 0.0) == 1.0


def test_the_simulators_scaler_agrees_with_the_profiles_curve() -> None:
    curve = idle_curve(_pts(100, 0.6, 0.8) + _pts(400, 0.9, 0.95), 170)
    scale = idle_scaler(curve)
    assert scale is not None and idle_scaler([]) is None
    for idle in (-0.01, 0.0, 0.001, 0.004, 0.01, 0.0199, IDLE_COLD, 0.3):
        assert scale(idle) == pytest.approx(idle_factor(curve, idle), abs=1e-12), idle


def test_decreasing_factors_are_refused_naming_the_rate() -> None:
    with pytest.raises(ValueError) as e:
        one_table_path("rabbitmq", np.full(100, 0.001), consumer_idle=_pts(130, 0.9, 0.7))
    assert "consumer idle points at 130 msg/s need" in str(e.value)
    assert "(0.001, 0.9), (0.01, 0.7)" in str(e.value)


SCENARIO = """
name: busy-consumer
seed: 4
duration: 60s
warmup: 2s
broker: {kind: activemq}
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: {kind: poisson, rate: 100/s}, size: 200B}]
consumers:
  - {name: c, queue: q, service_time: {kind: exponential, mean: 5ms}}
"""


def test_a_consumer_busy_half_the_time_gets_its_short_idle_deliveries_sooner() -> None:
    """Message by message (the same seed draws the same table value), a delivery to a consumer
    idle for less than 1 ms takes its table draw times 0.6; one after 20 ms all of it."""
    s, issues = parse_scenario(SCENARIO)
    assert s is not None, issues
    sample = 0.0004 + np.random.default_rng(5).gamma(2.0, 0.0002, 4000)
    out = {}
    for name, pts in (("cold", []), ("idle", _pts(10, 0.6, 0.8))):
        cp = one_table_path("activemq", sample, consumer_idle=pts)
        prof = default_profile("activemq").model_copy(update={"client_path": cp})
        d = Model(s, prof, 0).run().tables["deliveries"].to_pandas()
        out[name] = d[(d.outcome == "acked") & (d.attempt == 1)].set_index("msg_id")
    cold, idle = out["cold"], out["idle"]
    ci = consumer_idle(cold.reset_index()).to_numpy()
    ratio = (idle.latency_s.reindex(cold.index) / cold.latency_s).to_numpy()
    short, long_ = (ci > 0) & (ci < 0.001), ci > IDLE_COLD
    assert short.sum() > 200 and long_.sum() > 100, (short.sum(), long_.sum())
    assert np.median(ratio[long_]) == pytest.approx(1.0, abs=0.01)
    # the table's draw scaled by 0.6, the network hops not: (hops + 0.6 draw) / (hops + draw)
    assert 0.6 <= np.median(ratio[short]) < 0.85
