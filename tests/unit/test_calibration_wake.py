"""The calibration's sparse stream and the wake-up points measured from it
(`testbed.calibration.wake`, `path_scenario.IDLE`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from testbed.calibration.path_scenario import END, PHASES, at, calibration_scenario, phase_of
from testbed.calibration.path_streams import IDLE, IDLE_RATE, IDLE_START, IDLE_STOP
from testbed.calibration.wake import MIN_BIN, awake, awake_level, idle_before, wake_points
from testbed.core.client_path import WAKE_AWAKE
from testbed.core.scenario_loader import parse_scenario


def _sparse(rng: np.random.Generator, n: int, extra) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """``n`` deliveries of the sparse stream at IDLE_RATE msg/s (Poisson) whose delay is 0.5 ms
    plus ``extra(idle)`` plus a little noise; each handler ends 0.1 ms after its start."""
    t0 = at(IDLE_START, 1.0)
    t = t0 + np.cumsum(rng.exponential(1 / IDLE_RATE, n))
    idle = np.diff(np.concatenate([[t0 - 1.0], t])) - 0.0  # set below, from the ends
    delay = np.empty(n)
    last_end = t0 - 1.0
    for i, ti in enumerate(t):
        idle[i] = ti - last_end
        delay[i] = 0.0005 + extra(idle[i]) + rng.normal(0, 0.00002)
        last_end = ti + delay[i] + 0.0001
    return pd.DataFrame(
        {
            "queue": f"mqbed-cal-{IDLE}",
            "outcome": "acked",
            "t_deliver": t + delay,
            "t_done": t + delay + 0.0001,
            "latency_s": delay,
        }
    )


def _step(idle: float) -> float:
    """A machine that wakes 0.4 ms slower after 20 ms of idle, 0.6 ms after 100 ms."""
    return 0.0 if idle <= 0.02 else (0.0004 if idle <= 0.1 else 0.0006)


def test_the_wake_points_recover_the_extra_delay_by_idle_time() -> None:
    d = _sparse(np.random.default_rng(1), 2000, _step)
    points = wake_points(d)
    assert [p.idle for p in points] == sorted(p.idle for p in points)
    assert all(p.n >= MIN_BIN for p in points)
    by_idle = {round(p.idle, 3): p.extra for p in points}
    for p in points:
        assert p.extra == pytest.approx(_step(p.idle), abs=0.00003), (p.idle, by_idle)
    assert sum(p.n for p in points) == (
        (idle_before(d, f"mqbed-cal-{IDLE}").idle > WAKE_AWAKE).sum()
    )


def test_the_idle_time_counts_every_queue_and_the_handlers_ends() -> None:
    """A delivery of another stream 3 ms before a sparse publish makes the machine awake."""
    d = _sparse(np.random.default_rng(2), 50, lambda idle: 0.0)
    t0 = float((d.t_deliver - d.latency_s).iloc[10])
    other = pd.DataFrame(
        {
            "queue": ["mqbed-cal-small"],
            "outcome": ["acked"],
            "t_deliver": [t0 - 0.0025],
            "t_done": [t0 - 0.002],
            "latency_s": [0.0005],
        }  # fmt: skip
    )
    idle = idle_before(pd.concat([d, other], ignore_index=True), f"mqbed-cal-{IDLE}")
    assert idle.idle.loc[10] == pytest.approx(0.002)  # (the first publish has no idle time)


def test_awake_delays_lose_the_wake_up_of_their_idle_time_and_nothing_else() -> None:
    """The load phases' tables hold what a delivery takes on an awake machine: the simulator
    adds the wake-up after idle time itself. A delivery after 2 ms keeps its delay; one after
    100 ms loses the 0.6 ms of the measured points there (never below a quarter of itself)."""
    d = _sparse(np.random.default_rng(6), 2000, _step)
    points = wake_points(d)
    idle = idle_before(d, f"mqbed-cal-{IDLE}").idle
    every = awake(d, points)
    assert every.index.equals(d.index) and every[0] == d.latency_s[0]  # no idle time: kept
    kept = every[idle.index]
    extra = (d.latency_s[idle.index] - kept).to_numpy()
    assert np.all(extra[idle.to_numpy() <= WAKE_AWAKE] == 0.0)
    long_ = idle.to_numpy() > 0.2
    assert long_.sum() > 50
    assert np.median(extra[long_]) == pytest.approx(0.0006, abs=0.00005)
    assert np.median(kept[idle > WAKE_AWAKE]) == pytest.approx(0.0005, abs=0.00005)
    assert awake(d, []).equals(d.latency_s)  # no points: unchanged
    tiny = d.assign(latency_s=0.0001)
    assert (awake(tiny, points) >= 0.25 * 0.0001 - 1e-12).all()


def test_the_points_are_non_decreasing_and_empty_without_an_awake_baseline() -> None:
    dip = lambda idle: 0.0 if idle <= 0.02 else (0.0005 if idle <= 0.05 else 0.0003)  # noqa: E731
    points = wake_points(_sparse(np.random.default_rng(3), 2000, dip))
    assert points[-1].extra == pytest.approx(points[-2].extra)  # the dip is noise: held level
    d = _sparse(np.random.default_rng(4), 2000, _step)
    asleep = idle_before(d, f"mqbed-cal-{IDLE}").idle > WAKE_AWAKE
    assert wake_points(d.loc[asleep[asleep].index]) == []  # no awake delivery to compare with


def test_the_sparse_stream_runs_alone_between_the_load_phases() -> None:
    """Its publishes fall in no load phase (no delivery table of its rate), nothing else
    publishes then (the load phases before it, the quiet one after), and the generated scenario
    is valid and lasts until the last stream stops."""
    spec = calibration_scenario("rabbitmq", "pika", scale=2.0)
    s, issues = parse_scenario(yaml.safe_dump(spec))
    assert s is not None, issues
    idle = [p for p in s.producers if p.queue == f"mqbed-cal-{IDLE}"]
    assert len(idle) == 1 and float(idle[0].start) == at(IDLE_START, 2.0)
    for p in s.producers:
        if p.queue != f"mqbed-cal-{IDLE}":  # before the sparse stream, or after it
            assert float(p.stop) <= at(IDLE_START, 2.0) or float(p.start) >= at(IDLE_STOP, 2.0)
    assert all(ph.stop <= IDLE_START or ph.start >= IDLE_STOP for ph in PHASES)
    assert any(ph.start >= IDLE_STOP for ph in PHASES)  # the quiet phase
    assert float(s.duration) >= at(END, 2.0) >= at(IDLE_STOP, 2.0)
    t = pd.Series(np.linspace(at(IDLE_START, 2.0), at(IDLE_STOP, 2.0), 50))
    assert phase_of(t, 2.0).isna().all()


def test_the_wake_up_is_measured_above_the_level_of_the_tables_it_is_added_to() -> None:
    """The base is the load phases' small stream published while the machine was awake to a
    cold consumer (0.6 ms here), not the sparse stream's few awake deliveries (0.5 ms): the
    simulator adds the wake-up to tables at the first level."""
    sparse = _sparse(np.random.default_rng(4), 2000, _step)
    low = PHASES[0]
    rows = []
    for t in np.arange(
        at(low.start, 1.0) + 1.1, at(low.stop, 1.0) - 0.1, 0.05
    ):  # cold: 50 ms apart
        rows.append(("mqbed-cal-small", "s", t + 0.0006, 0.0006, t + 0.0006))
    for t in np.arange(at(low.start, 1.0) + 1.0, at(low.stop, 1.0), 0.002):  # the machine awake
        rows.append(("mqbed-cal-persistent", "p", t + 0.0004, 0.0004, t + 0.0004))
    loaded = pd.DataFrame(rows, columns=["queue", "consumer", "t_deliver", "latency_s", "t_done"])
    d = pd.concat([loaded.assign(outcome="acked"), sparse], ignore_index=True)
    assert awake_level(d) == pytest.approx(0.0006)
    points = wake_points(d)
    assert points and all(p.n >= MIN_BIN for p in points)
    for p in points:
        assert p.extra == pytest.approx(max(_step(p.idle) - 0.0001, 0.0), abs=0.00003), p
    assert awake_level(sparse) is None  # no load phase: the sparse stream's own awake base
    assert [p.extra for p in wake_points(sparse)] != [p.extra for p in points]
