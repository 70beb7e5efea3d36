"""What a simulated controller reads is as stale as the live broker's statistics."""

from __future__ import annotations

from typing import Any

import simpy

from emulator.sim.autoscale import STATS_REFRESH, StatsFeed, observation_of


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


def test_rabbitmq_controllers_read_the_last_statistics_tick() -> None:
    m = _Model()
    feed = StatsFeed(m, STATS_REFRESH["rabbitmq"])
    m.env.run(until=2.5)
    fig, base, window = feed.read({}, 5.0)
    assert fig["q"]["depth_ready"] == 20.0  # the state at t = 2, not 25 at t = 2.5
    assert base["q"]["depth_ready"] == 10.0 and window == 1.0
    obs = observation_of(2.5, fig, base, ["q"], window)
    assert obs.queues["q"].ready == 20 and obs.queues["q"].publish_rate == 10.0


def test_activemq_controllers_read_live_counters() -> None:
    m = _Model()
    feed = StatsFeed(m, STATS_REFRESH["activemq"])
    m.env.run(until=2.5)
    fig, base, window = feed.read({"q": {"published": 5.0}}, 5.0)
    assert fig["q"]["depth_ready"] == 25.0 and base == {"q": {"published": 5.0}} and window == 5.0
