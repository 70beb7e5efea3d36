"""A handler's burst of follow-ups in the simulator (the calibration's burst stream).

Live, a handler that publishes several follow-ups sends them ``follow_gap`` apart (a publish's
wall time in a handler, more than its CPU) and holds its Locust process until the last is sent.
On ActiveMQ none reaches its consumer before the last is sent; on RabbitMQ each is on its way
from its own stamp (SPECjms2007 interaction 1, 2026-11-29: the first of three started 0.75-0.83
ms after the last stamp on ActiveMQ, a single follow-up taking 0.65-0.71 ms; 0.34 ms on
RabbitMQ, a single one taking 0.77-0.88 ms). A broken simulator spaces the stamps by the
publish CPU, releases RabbitMQ's burst at its last stamp, or lets a member start before the
handler has sent the last one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sim.model import Model
from testbed.core.client_path import CpuSplit
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import parse_scenario
from tests.unit.pathkit import one_table_path

TRANSIT = 0.0002
SAMPLE = TRANSIT + np.random.default_rng(5).uniform(0.0, 0.00001, 4000)  # ~constant transit
PUBLISH, RECEIVE, GAP = 0.00003, 0.00002, 0.0004

SCENARIO = """
name: burst
seed: 4
duration: 30s
warmup: 1s
broker: {kind: %s}
topology:
  queues: [{name: in}, {name: a}, {name: b}, {name: c}]
producers: [{name: p, queue: in, arrival: {kind: poisson, rate: 20/s}, size: 200B}]
consumers:
  - name: h
    queue: in
    service_time: {kind: deterministic, value: 0ms}
    follow_ups:
      - {message_type: A, queue: a, size: 200B}
      - {message_type: B, queue: b, size: 200B}
      - {message_type: C, queue: c, size: 200B}
  - {name: ca, queue: a, service_time: {kind: deterministic, value: 5ms}}
  - {name: cb, queue: b, service_time: {kind: deterministic, value: 5ms}}
  - {name: cc, queue: c, service_time: {kind: deterministic, value: 5ms}}
"""


def _run(kind: str, measured: bool) -> pd.DataFrame:
    """Each follow-up with its burst, stamp, start and the burst's last stamp."""
    extra = {"follow_gap": GAP} if measured else {}
    path = one_table_path(
        kind, SAMPLE, cpu_per_op=RECEIVE,
        cpu=CpuSplit(publish=PUBLISH, receive=RECEIVE, ack=0.0), **extra,
    )  # fmt: skip
    profile = default_profile(kind).model_copy(update={"client_path": path})
    s, issues = parse_scenario(SCENARIO % kind)
    assert s is not None, issues
    tables = Model(s, profile, 0).run().tables
    m = tables["messages"].to_pandas()
    d = tables["deliveries"].to_pandas()
    d = d[(d.outcome == "acked") & d.queue.isin(["a", "b", "c"])]
    f = m[m.flow.isin(["A", "B", "C"])].sort_values("t_publish")
    f = f.assign(burst=(f.t_publish.diff().fillna(1.0) > 0.002).cumsum())
    f = f[f.groupby("burst").msg_id.transform("size") == 3]
    f = f.assign(last=f.groupby("burst").t_publish.transform("max"))
    return f.merge(d[["msg_id", "t_deliver"]], on="msg_id")


def _stamp_gaps(f: pd.DataFrame) -> np.ndarray:
    return f.sort_values(["burst", "t_publish"]).groupby("burst").t_publish.diff().dropna()


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_burst_is_sent_follow_gap_apart_and_holds_its_process(kind: str) -> None:
    f = _run(kind, measured=True)
    assert f.burst.nunique() > 300
    assert _stamp_gaps(f).to_numpy() == pytest.approx(GAP, abs=1e-9)
    # the consumers share the handler's process: none starts before the last send (but for
    # the odd burst whose booking another booking of the calendar pushed back)
    assert (f.t_deliver >= f["last"] + RECEIVE - 1e-9).mean() > 0.99


def test_on_rabbitmq_each_follow_up_leaves_at_its_own_stamp() -> None:
    f = _run("rabbitmq", measured=True)
    first = f[f.t_publish < f["last"] - 1.5 * GAP]  # sent 2 gaps before the last
    # its transit ran during the burst: it starts as soon as the process is free
    assert (first.t_deliver - first["last"]).median() < TRANSIT / 2 + RECEIVE + GAP


def test_on_activemq_the_burst_leaves_after_its_last_send() -> None:
    f = _run("activemq", measured=True)
    assert (f.t_deliver - f["last"]).min() >= TRANSIT - 1e-9  # every one: the whole transit


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_without_the_measured_gap_the_publish_cpu_spaces_the_stamps(kind: str) -> None:
    assert _stamp_gaps(_run(kind, measured=False)).to_numpy() == pytest.approx(PUBLISH, abs=1e-9)
