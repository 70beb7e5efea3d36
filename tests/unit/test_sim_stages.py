"""The broker's stages when a client path is measured (emulator.sim.costs._broker_stages).

A client path's delivery table is the whole publish → handler path at its load, spread included.
The simulator takes the broker's stages out of the table by their mean and adds them back as it
runs; a random stage would spread the table a second time, and a stage longer than the fastest
measured delivery would cut the table off at zero.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from emulator.sim.costs import derive_costs
from emulator.sim.model import Model
from testbed.core.client_path import ClientPath, PathPoint
from testbed.core.distributions import Deterministic
from testbed.core.profile import default_profile
from testbed.core.quantiles import quantile_table
from testbed.core.scenario_loader import parse_scenario
from tests.unit.pathkit import one_table_path

RNG = np.random.default_rng(7)
SAMPLE = 0.00022 + RNG.gamma(2.0, 0.00015, 4000)  # floor 0.22 ms, median ~0.47 ms
"""A delivery delay shaped as measured on ActiveMQ/stomp: a hard floor and a long tail."""


def _path(kind: str, client: str) -> ClientPath:
    return one_table_path(kind, SAMPLE)


def _profile(kind: str, client: str, stage_mean: float = 0.0002):  # type: ignore[no-untyped-def]
    p = default_profile(kind)
    threads = p.threads.model_copy(
        update={
            "receive": p.threads.receive.model_copy(update={"mean": stage_mean, "sd": stage_mean}),
            "dispatch": p.threads.dispatch.model_copy(
                update={"mean": stage_mean, "sd": stage_mean}
            ),
        }
    )
    qs = p.queue_service.model_copy(update={"a": 2 * stage_mean})
    return p.model_copy(
        update={"threads": threads, "queue_service": qs, "client_path": _path(kind, client)}
    )


def test_without_a_client_path_the_stages_are_the_profiles_laws() -> None:
    p = _profile("activemq", "stomp").model_copy(update={"client_path": None})
    c = derive_costs(p, "threads", 1, 1e9)
    assert not isinstance(c.receive, Deterministic)  # exponential, sd = mean
    assert float(c.receive.mean) == pytest.approx(0.0002)
    a = derive_costs(_profile("rabbitmq", "pika").model_copy(update={"client_path": None}),
                     "amqp", 1, 1e9)  # fmt: skip
    assert a.queue_a == pytest.approx(0.0004)


def test_with_a_client_path_threads_stages_are_constant_and_fit_under_the_fastest_delivery() -> (
    None
):
    p = _profile("activemq", "stomp")
    c = derive_costs(p, "threads", 1, 1e9, table_stages=True)
    assert isinstance(c.receive, Deterministic) and isinstance(c.dispatch, Deterministic)
    room = SAMPLE.min() - 2 * p.network_delay
    assert float(c.receive.mean + c.dispatch.mean) == pytest.approx(room, rel=1e-6)
    assert float(c.receive.mean) == pytest.approx(float(c.dispatch.mean))  # the split is kept
    # a profile whose stages already fit keeps their means
    small = derive_costs(
        _profile("activemq", "stomp", stage_mean=0.00005), "threads", 1, 1e9, table_stages=True
    )
    assert float(small.receive.mean) == pytest.approx(0.00005)
    # the residual table keeps the measured floor: nothing is cut off at zero
    table = c.residual_table(100.0, 200.0, persistent=False)
    assert table is not None and table.q[1] > 0.0


def test_only_messages_drawn_from_a_confirmed_table_skip_the_confirm_overhead() -> None:
    """Confirmed messages draw from the confirmed table of their persistence, which holds the
    confirm-mode publish; without one (transient ones before calibration revision 5) they draw
    points measured from a producer that does not confirm, and pay the overhead."""
    p = _profile("rabbitmq", "pika")
    p = p.model_copy(update={"confirm_overhead": p.confirm_overhead.model_copy(update={"a": 3e-4})})
    c = derive_costs(p, "amqp", 1, 1e9)
    assert c.confirm_extra(persistent=True) == (0.0, 0.0)
    assert c.confirm_extra(persistent=False)[0] == pytest.approx(3e-4)
    without = derive_costs(p.model_copy(update={"client_path": None}), "amqp", 1, 1e9)
    assert without.confirm_extra(persistent=True)[0] == pytest.approx(3e-4)
    cp = p.client_path
    assert cp is not None
    plain = cp.model_copy(update={"delivery": [x for x in cp.delivery if not x.confirms]})
    older = derive_costs(p.model_copy(update={"client_path": plain}), "amqp", 1, 1e9)
    assert older.confirm_extra(persistent=True)[0] == pytest.approx(3e-4)
    # calibration revision 5 measures transient confirmed deliveries: no overhead on top
    table = quantile_table(SAMPLE)
    five = cp.model_copy(
        update={
            "delivery": [*cp.delivery, PathPoint(rate=10, size=200, confirms=True, table=table)]
        }
    )
    c5 = derive_costs(p.model_copy(update={"client_path": five}), "amqp", 1, 1e9)
    assert c5.confirm_extra(persistent=False) == (0.0, 0.0)


def test_with_a_client_path_the_amqp_queue_process_fits_under_the_fastest_delivery() -> None:
    p = _profile("rabbitmq", "pika")
    c = derive_costs(p, "amqp", 1, 1e9, table_stages=True)
    assert c.queue_a == pytest.approx(SAMPLE.min() - 2 * p.network_delay, rel=1e-6)
    # the closed forms keep the profile's stages (their stations need exponential service)
    assert derive_costs(p, "amqp", 1, 1e9).queue_a == pytest.approx(0.0004)
    closed = derive_costs(_profile("activemq", "stomp"), "threads", 1, 1e9)
    assert not isinstance(closed.receive, Deterministic)
    assert float(closed.receive.mean) == pytest.approx(0.0002)


SCENARIO = """
name: light
seed: 5
duration: 30s
warmup: 2s
broker: {{kind: {kind}, client: {client}}}
topology: {{queues: [{{name: q}}]}}
producers:
  - {{name: p, queue: q, arrival: {{kind: poisson, rate: 20/s}}, size: 200B,
     persistent: {confirms}, confirms: {confirms}}}
consumers: [{{name: c, queue: q, prefetch: 10, service_time: {{kind: deterministic, value: 0ms}}}}]
"""


@pytest.mark.parametrize(
    ("kind", "client", "confirms"),
    [("activemq", "stomp", False), ("rabbitmq", "pika", False), ("rabbitmq", "pika", True)],
)
def test_at_light_load_the_prediction_is_the_measured_table(
    kind: str, client: str, confirms: bool
) -> None:
    """At 20 msg/s nothing queues: every quantile of the predicted latency is the table's (the
    exponential stages of before put the ActiveMQ p10 0.1 ms below the floor, the p90 above;
    a confirmed persistent message's table already holds the confirm-mode publish)."""
    text = SCENARIO.format(kind=kind, client=client, confirms=str(confirms).lower())
    s, issues = parse_scenario(text)
    assert s is not None, issues
    r = Model(s, _profile(kind, client), 0).run()
    d = r.tables["deliveries"].to_pandas()
    lat = d.latency_s.to_numpy()
    assert len(lat) > 400
    assert lat.min() >= SAMPLE.min() * 0.99  # never below the fastest measured delivery
    # the share of deliveries below each of the table's deciles is that decile, within four
    # binomial standard errors of a sample this size (what the draws allow, not a percentage)
    for p in (0.1, 0.5, 0.9):
        below = float(np.mean(lat <= np.quantile(SAMPLE, p)))
        assert abs(below - p) < 4 * math.sqrt(p * (1 - p) / len(lat)), (p, below)
