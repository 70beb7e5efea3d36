"""A copy that waited at the broker draws the turnaround, not the whole delivery path.

The delivery table is publish → start of a message nobody waited for. A prefetch-1 consumer's
next message, waiting at the broker, is dispatched when its ack arrives: only the way back is
ahead of it (`emulator.sim.paths`, `ClientPath.turnaround`).
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator.sim.model import Model
from testbed.core.client_path import HoldPoint
from testbed.core.profile import Profile, default_profile
from testbed.core.quantiles import quantile_table
from testbed.core.scenario_loader import parse_scenario
from tests.unit.pathkit import one_table_path

RNG = np.random.default_rng(3)
PATH = 0.0006 + RNG.gamma(2.0, 0.0002, 4000)  # publish → start: floor 0.6 ms, median ~0.93 ms
TURN = 0.0002 + RNG.gamma(2.0, 0.00005, 4000)  # ack → start: floor 0.2 ms, median ~0.28 ms

SCENARIO = """
name: turn
seed: 4
duration: 60s
warmup: 2s
broker: {kind: %s}
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: {kind: poisson, rate: 60/s}, size: 200B}]
consumers: [{name: c, queue: q, prefetch: 1, service_time: {kind: exponential, mean: 10ms}}]
"""


def _profile(kind: str, turnaround: bool) -> Profile:
    turns = [HoldPoint(rate=r, service=0.008, table=quantile_table(TURN)) for r in (10, 400)]
    path = one_table_path(kind, PATH, turnaround=turns if turnaround else [])
    return default_profile(kind).model_copy(update={"client_path": path})


def _gaps(kind: str, turnaround: bool) -> tuple[np.ndarray, np.ndarray]:
    """(ack → next start of messages that waited, latencies of those that did not)."""
    s, issues = parse_scenario(SCENARIO % kind)
    assert s is not None, issues
    d = Model(s, _profile(kind, turnaround), 0).run().tables["deliveries"].to_pandas()
    d = d[d.outcome == "acked"].sort_values("t_deliver")
    pub = (d.t_deliver - d.latency_s).to_numpy()
    start, done = d.t_deliver.to_numpy(), d.t_done.to_numpy()
    waited = pub[1:] < done[:-1]
    idle = np.concatenate([[True], ~waited])
    return (start[1:] - done[:-1])[waited], d.latency_s.to_numpy()[idle]


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_message_that_waited_starts_a_turnaround_after_the_ack(kind: str) -> None:
    gaps, fresh = _gaps(kind, turnaround=True)
    assert len(gaps) > 500 and len(fresh) > 500
    for p in (10, 50, 90):
        assert np.percentile(gaps, p) == pytest.approx(np.percentile(TURN, p), rel=0.1), p
        # a message nobody waited for still takes the whole path
        assert np.percentile(fresh, p) == pytest.approx(np.percentile(PATH, p), rel=0.1), p


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_without_a_measured_turnaround_a_waiting_message_takes_the_whole_path_again(
    kind: str,
) -> None:
    """Profiles of calibration revision 4 have no turnaround: as before, the whole table again
    after the dispatch, less the broker's stages (passed before the wait)."""
    gaps, _ = _gaps(kind, turnaround=False)
    s, _ = parse_scenario(SCENARIO % kind)
    assert s is not None
    c = Model(s, _profile(kind, turnaround=False), 0).costs
    amqp = kind == "rabbitmq"
    stages = c.queue_a + c.queue_b * 200 if amqp else float(c.receive.mean + c.dispatch.mean)
    assert np.median(gaps) == pytest.approx(np.median(PATH) - stages, rel=0.1)
    assert np.median(gaps) > 2 * np.median(TURN)


def test_the_turnaround_leaves_the_ready_flag_down_between_dispatches() -> None:
    s, _ = parse_scenario(SCENARIO % "rabbitmq")
    assert s is not None
    m = Model(s, _profile("rabbitmq", turnaround=True), 0)
    m.run()
    assert not any(q.waited for q in m.queues.values())
