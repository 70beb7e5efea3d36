"""A handler's follow-ups in the simulator (`emulator.sim.consumers`, docs/models.md §9a).

Measured on SPECjms2007 interaction 1 (RabbitMQ, 2026-11-27): one handler publishes OrderConf,
ShipDep and StatInfo in a row, 0.19 and 0.11 ms apart, and their medians were 0.98, 0.85 and
0.73 ms — the same 0.70-0.73 ms once the time from each stamp to the last one's is taken off:
none was on its way before the last was sent. Later runs (2026-11-29, docs/models.md §9) kept
that on ActiveMQ and not always on RabbitMQ, whose bursts now leave each at its own stamp
(``KindFacts.follow_ups_together``; ActiveMQ's rule is `test_sim_follow_burst`'s). The simulator
stamps them a publish's CPU apart (the calibration's ``follow_gap`` when measured); one
follow-up per handler (the calibration's) is unchanged.
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

RNG = np.random.default_rng(17)
SAMPLE = 0.0003 + RNG.gamma(2.0, 0.0002, 4000)
PUBLISH = 0.0002  # CPU seconds of one publish on its Locust process

SCENARIO = """
name: chain
seed: 4
duration: 60s
warmup: 2s
broker: {{kind: rabbitmq}}
topology:
  queues: [{{name: orders}}, {{name: a}}, {{name: b}}, {{name: c}}]
producers: [{{name: p, queue: orders, arrival: {{kind: poisson, rate: 20/s}}, size: 200B}}]
consumers:
  - name: h
    queue: orders
    service_time: {{kind: deterministic, value: 1ms}}
    follow_ups:
      - {{message_type: A, queue: a}}
      - {{message_type: B, queue: b, probability: {pb}}}
      - {{message_type: C, queue: c}}
  - {{name: ca, queue: a, service_time: {{kind: deterministic, value: 0ms}}}}
  - {{name: cb, queue: b, service_time: {{kind: deterministic, value: 0ms}}}}
  - {{name: cc, queue: c, service_time: {{kind: deterministic, value: 0ms}}}}
"""


def _run(publish: float, pb: float = 1.0) -> pd.DataFrame:
    """The follow-ups' messages with their delivery latency and handler (publish times)."""
    s, issues = parse_scenario(SCENARIO.format(pb=pb))
    assert s is not None, issues
    cpu = CpuSplit(publish=publish, receive=0.0, ack=0.0)
    path = one_table_path("rabbitmq", SAMPLE, cpu_per_op=publish, cpu=cpu)
    m = Model(s, default_profile("rabbitmq").model_copy(update={"client_path": path}), 0)
    tables = m.run().tables
    msgs = tables["messages"].to_pandas()
    d = tables["deliveries"].to_pandas()
    d = d[(d.outcome == "acked") & (d.attempt == 1)][["msg_id", "latency_s"]]
    f = msgs[msgs.flow.isin(["A", "B", "C"])].merge(d, on="msg_id")
    f = f.sort_values("msg_id", key=lambda ids: ids.astype(int))  # in publish order
    f["handler"] = (f.flow == "A").cumsum()  # every handler publishes A first
    f["first"] = f.groupby("handler").t_publish.transform("min")
    f["last"] = f.groupby("handler").t_publish.transform("max")
    return f


def test_follow_ups_are_stamped_a_publish_apart_and_each_leaves_at_its_stamp() -> None:
    f = _run(PUBLISH)
    step = (f.t_publish - f["first"]).groupby(f.flow).median()
    assert step.to_dict() == pytest.approx({"A": 0.0, "B": PUBLISH, "C": 2 * PUBLISH}, abs=1e-9)
    # RabbitMQ: each is on its way from its own stamp (the transit outlasts the burst, so none
    # waits for the handler's process): every position has the same path from its stamp
    raw = f.latency_s.groupby(f.flow).median()
    assert raw.max() - raw.min() < 0.00005
    # without a publish cost they are stamped together and none waits
    free = _run(0.0)
    assert (free.t_publish == free["first"]).all()
    assert free.latency_s.groupby(free.flow).median().to_dict() == pytest.approx(
        raw.to_dict(), abs=0.00005
    )


def test_only_the_follow_ups_a_handler_really_publishes_are_spaced() -> None:
    """B is skipped half of the time: then C follows A by one publish, not two, and a
    handler's single follow-up leaves at its own stamp."""
    f = _run(PUBLISH, pb=0.5)
    n = f.groupby("handler").flow.transform("size")
    c = f[f.flow == "C"]
    gap = (c.t_publish - c["first"]).groupby(n[c.index]).median()
    assert gap.to_dict() == pytest.approx({2: PUBLISH, 3: 2 * PUBLISH}, abs=1e-9)
    assert (n == 2).mean() == pytest.approx(0.5 * 2 / 2.5, abs=0.06)  # of the A and C rows
