"""Fanned-out copies in the simulator when a client path is measured.

Measured on both brokers (fan-out 1→10 and SPECjms2007 interaction 3, 2026-11-27), the copies
of one message reach their handlers within 0.1–0.2 ms of each other, while one queue's delivery
table spreads over a millisecond: the copies share their publish and broker path. So they share
one draw of the table (`Broker.shared_draw`), and what spaces them is the consumers' receive
work on their Locust process (`emulator.sim.client_cpu`) — not the calibration's per-destination
slope on every copy, which is mostly that same client work measured in calibration's process.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sim.costs import derive_costs
from emulator.sim.model import Model
from testbed.core.client_path import CpuSplit
from testbed.core.profile import Profile, default_profile
from testbed.core.scenario_loader import parse_scenario
from tests.unit.pathkit import one_table_path

RNG = np.random.default_rng(11)
SAMPLE = 0.0003 + RNG.gamma(2.0, 0.0003, 4000)  # floor 0.3 ms, p10–p90 spread ~1 ms
RECEIVE = 0.0001  # CPU seconds of a delivery before its handler, on its Locust process
N = 5

SCENARIO = f"""
name: fan
seed: 9
duration: 40s
warmup: 2s
workers: {{workers}}
broker: {{{{kind: {{kind}}}}}}
topology:
  exchanges: [{{{{name: x, type: fanout}}}}]
  queues: [{", ".join(f"{{{{name: q{i}, bindings: [{{{{exchange: x}}}}]}}}}" for i in range(N))}]
producers: [{{{{name: p, exchange: x, arrival: {{{{kind: poisson, rate: 20/s}}}}, size: 200B}}}}]
consumers: [{
    ", ".join(
        f"{{{{name: c{i}, queue: q{i}, service_time: {{{{kind: deterministic, value: 0ms}}}}}}}}"
        for i in range(N)
    )
}]
"""


def _profile(
    kind: str, cpu: bool, per_destination: float = 0.001, gap: float | None = None
) -> Profile:
    path = one_table_path(
        kind,
        SAMPLE,
        cpu_per_op=RECEIVE if cpu else None,
        cpu=CpuSplit(publish=0.0, receive=RECEIVE, ack=0.0) if cpu else None,
        copy_gap=gap,
    )
    p = default_profile(kind)
    routing = p.routing.model_copy(update={"per_destination": per_destination})
    return p.model_copy(update={"client_path": path, "routing": routing})


def _run(
    kind: str,
    cpu: bool,
    workers: int,
    per_destination: float = 0.001,
    gap: float | None = None,
    service: str = "0ms",
) -> tuple[pd.DataFrame, Model]:
    text = SCENARIO.format(kind=kind, workers=workers).replace("value: 0ms", f"value: {service}")
    s, issues = parse_scenario(text)
    assert s is not None, issues
    m = Model(s, _profile(kind, cpu, per_destination, gap), 0)
    d = m.run().tables["deliveries"].to_pandas()
    d = d[d.outcome == "acked"].sort_values(["msg_id", "latency_s"]).copy()
    d["rank"] = d.groupby("msg_id").cumcount()
    return d, m


def _steps(d: pd.DataFrame) -> np.ndarray:
    """Median gap between consecutive copies of one message, by rank (whole messages only)."""
    whole = d.groupby("msg_id").latency_s.transform("size") == N
    w = d[whole].pivot(index="msg_id", columns="rank", values="latency_s").to_numpy()
    return np.median(np.diff(w, axis=1), axis=0)


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_copies_of_one_message_share_their_draw_of_the_delivery_table(kind: str) -> None:
    """Without client CPU costs only the broker spaces the copies — nothing on RabbitMQ's
    queue processes, ActiveMQ's one dispatch thread one stage per copy — and each queue's
    latencies are still the measured table (independent draws spread the five copies over
    ~1 ms, and put the first at the minimum of five draws)."""
    d, m = _run(kind, cpu=False, workers=1, per_destination=0.0)
    assert d.groupby("msg_id").size().eq(N).mean() > 0.99
    spread = d.groupby("msg_id").latency_s.agg(lambda x: x.max() - x.min())
    broker = (N - 1) * float(m.costs.dispatch.mean) if kind == "activemq" else 0.0
    assert spread.quantile(0.9) == pytest.approx(broker, abs=0.00002)  # independent: ~1 ms
    first = d[d["rank"] == 0].latency_s  # every message's first copy: the measured table
    for p in (10, 50, 90):
        assert np.percentile(first, p) == pytest.approx(np.percentile(SAMPLE, p), rel=0.1), p
    assert m.broker.coupled == {}  # every copy took its share: nothing kept after the run


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_one_process_spaces_the_copies_by_its_receive_work_not_per_destination(
    kind: str,
) -> None:
    """Five consumers in one Locust process: copy k of a message waits for the receive work of
    the k before it. The profile's 1 ms per destination is not added to every copy (it would
    put the first copy's median 4 ms above the table's). On ActiveMQ the dispatch thread's
    stage per copy spaces them too; the longer of the two sets the pace."""
    d, m = _run(kind, cpu=True, workers=1)
    med = d.groupby("rank").latency_s.median()
    first = float(np.median(SAMPLE)) + RECEIVE  # its own receive work
    assert med[0] == pytest.approx(first, rel=0.1)
    step = max(RECEIVE, float(m.costs.dispatch.mean)) if kind == "activemq" else RECEIVE
    assert _steps(d) == pytest.approx([step] * (N - 1), abs=0.2 * RECEIVE)


def test_the_closed_forms_and_a_path_without_cpu_costs_keep_the_per_destination_slope() -> None:
    with_cpu = _profile("activemq", cpu=True)
    assert derive_costs(with_cpu, "threads", 1, 1e9, table_stages=True).per_destination == 0.0
    assert derive_costs(with_cpu, "threads", 1, 1e9).per_destination == pytest.approx(0.001)
    without = _profile("rabbitmq", cpu=False)
    assert derive_costs(without, "amqp", 1, 1e9, table_stages=True).per_destination == (
        pytest.approx(0.001)
    )


def test_the_measured_copy_gap_is_the_work_booked_before_a_handler() -> None:
    """With the calibration's copy gap, a delivery books that much of its receive CPU before
    its handler and the rest after its service: copies are spaced by the gap, and the process
    is still charged the whole receive (after a 5 ms service, outside the burst)."""
    gap = 0.4 * RECEIVE
    d, m = _run("rabbitmq", cpu=True, workers=1, gap=gap, service="5ms")
    assert _steps(d) == pytest.approx([gap] * (N - 1), abs=0.1 * gap)
    assert m.costs.client_cpu() == pytest.approx((0.0, gap, RECEIVE - gap))
    wide = _profile("rabbitmq", cpu=True, gap=3 * RECEIVE)  # never more than the fitted receive
    assert derive_costs(wide, "amqp", 1, 1e9).client_cpu() == pytest.approx((0.0, RECEIVE, 0.0))
    # a split calibration's CPU outside the publish span is the publish's, booked before it
    cp = wide.client_path
    assert cp is not None and cp.cpu is not None
    split = cp.cpu.model_copy(update={"publish": 1e-4, "publish_rest": 3e-4})
    split_path = cp.model_copy(update={"cpu": split})
    costs = derive_costs(wide.model_copy(update={"client_path": split_path}), "amqp", 1, 1e9)
    assert costs.client_cpu() == pytest.approx((4e-4, RECEIVE, 0.0))


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_no_queue_always_hears_first(kind: str) -> None:
    """The copies of a message reach the consumers' process in a random order, as live (each
    of five queues came first for 13-34 % of messages); in binding order the first bound
    queue's consumer would always go first and its latency would be the lowest of five."""
    d, m = _run(kind, cpu=True, workers=1)
    first = d[d["rank"] == 0].queue.astype(str).value_counts(normalize=True)
    assert set(first.index) == {f"q{i}" for i in range(N)}
    assert first.max() < 0.3 and first.min() > 0.1, first.to_dict()
    by_queue = d.groupby(d.queue.astype(str)).latency_s.mean()
    assert by_queue.max() - by_queue.min() < RECEIVE, by_queue.to_dict()  # not ~4 x RECEIVE
    again, _ = _run(kind, cpu=True, workers=1)  # one seed, one order
    assert again.queue.astype(str).tolist() == d.queue.astype(str).tolist()
