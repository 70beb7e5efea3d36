"""What a simulated controller reads is as stale as the live broker's statistics."""

from __future__ import annotations

from typing import Any

import simpy

from emulator.sim.autoscale import StatsFeed, observation_of
from testbed.core.broker_kinds import ACTIVEMQ, RABBITMQ


class _Model:
    """The two things StatsFeed uses: a clock and ``observe()`` (a queue filling at 10/s)."""

    def __init__(self) -> None:
        self.env = simpy.Environment()
        self.stop_event = self.env.event()

    def add_process(self, gen: Any) -> None:
        self.env.process(gen)

    def observe(self) -> dict[str, dict[str, float]]:
        now = float(self.env.now)
        return {"q": {"depth_ready": 10 * now, "depth_unacked": 0, "consumers": 1,
                      "published": 10 * now, "delivered": 0, "acked": 0}}  # fmt: skip


def test_rabbitmq_controllers_read_the_tick_before_the_last() -> None:
    """Statistics pass the queue's own timer and the management collector's: a poll at 3.5 s
    reads the state of t = 2 (one tick behind the last, t = 3), rates from t = 1 to 2."""
    m = _Model()
    feed = StatsFeed(m, RABBITMQ.stats_refresh_s)
    m.env.run(until=3.5)
    fig, base, window = feed.read({}, 5.0)
    assert fig["q"]["depth_ready"] == 20.0  # the state at t = 2, not 30 at t = 3 or 35 now
    assert base["q"]["depth_ready"] == 10.0 and window == 1.0
    obs = observation_of(3.5, fig, base, ["q"], window)
    assert obs.queues["q"].ready == 20 and obs.queues["q"].publish_rate == 10.0


def test_a_poll_on_a_statistics_tick_reads_one_tick_back() -> None:
    """Simulated polls and ticks fall on the same instants (both every whole second): the
    poll at t = 3 must not read the tick of t = 3 it coincides with (live: 0.84-1.10 s old)."""
    m = _Model()
    feed = StatsFeed(m, RABBITMQ.stats_refresh_s)
    seen: list[float] = []

    def poll() -> Any:
        for k in (1, 2, 3):
            yield m.env.timeout(k - m.env.now)
            seen.append(feed.read({}, 1.0)[0]["q"]["depth_ready"])

    m.add_process(poll())
    m.env.run(until=3.5)
    assert seen == [0.0, 10.0, 20.0]


def test_without_lag_the_last_tick_is_read() -> None:
    m = _Model()
    feed = StatsFeed(m, 1.0, lag=0)
    m.env.run(until=2.5)
    fig, base, _ = feed.read({}, 5.0)
    assert fig["q"]["depth_ready"] == 20.0 and base["q"]["depth_ready"] == 10.0


def test_activemq_controllers_read_live_counters() -> None:
    m = _Model()
    feed = StatsFeed(m, ACTIVEMQ.stats_refresh_s)
    m.env.run(until=2.5)
    fig, base, window = feed.read({"q": {"published": 5.0}}, 5.0)
    assert fig["q"]["depth_ready"] == 25.0 and base == {"q": {"published": 5.0}} and window == 5.0
