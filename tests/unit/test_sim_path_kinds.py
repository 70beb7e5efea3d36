"""The simulator draws each queue's delivery path from the table of the traffic it carries:
persistent or not, confirmed or not, from producers or from consumers' handlers (follow-ups).

A broken choice predicts the wrong path for a whole queue: a PCM queue drawn from the
unconfirmed table was ~0.5 ms low at every quantile on ActiveMQ; follow-ups drawn from the
producers' table ~0.6 ms high on RabbitMQ (docs/models.md §9).
"""

from __future__ import annotations

import numpy as np
import pytest

from emulator.sim.model import Model
from emulator.sim.paths import queue_traffic
from testbed.core.client_path import ClientPath, PathPoint, Provenance
from testbed.core.profile import default_profile
from testbed.core.quantiles import quantile_table
from testbed.core.scenario_loader import parse_scenario

SCENARIO = """
name: path-kinds
duration: 30s
warmup: 2s
topology:
  queues: [{name: orders}, {name: plain}, {name: conf}, {name: stat}, {name: quotes}]
producers:
  - {name: shop, queue: orders, arrival: {kind: poisson, rate: 20/s}, size: 200B,
     persistent: true, confirms: true}
  - {name: p, queue: plain, arrival: {kind: poisson, rate: 20/s}, size: 200B, persistent: true}
  - {name: q, queue: quotes, arrival: {kind: poisson, rate: 20/s}, size: 200B, confirms: true}
consumers:
  - name: dc
    queue: orders
    follow_ups:
      - {message_type: Conf, queue: conf, size: 200B, persistent: true}
      - {message_type: Stat, queue: stat, size: 200B, probability: 0.5}
  - {name: c1, queue: plain}
  - {name: c2, queue: conf}
  - {name: c3, queue: stat}
  - {name: c4, queue: quotes}
"""

# floors (s) of each kind's table: far apart, so a queue's latency says which one it drew
FLOORS = {
    (False, False, False): 0.002,
    (True, False, False): 0.004,
    (True, True, False): 0.008,
    (True, False, True): 0.012,
    (False, False, True): 0.016,
    (False, True, False): 0.020,
}


def _profile():  # type: ignore[no-untyped-def]
    points = [
        PathPoint(
            rate=r,
            size=200,
            persistent=p,
            confirms=c,
            follow_up=f,
            table=quantile_table(np.linspace(lo, lo * 1.1, 200)),
        )  # fmt: skip
        for (p, c, f), lo in FLOORS.items()
        for r in (50, 300)
    ]
    cp = ClientPath(
        client="pika",
        delivery=points,
        provenance=Provenance(host="t", date="2026-11-26", broker_version="3.10.8", client="pika"),
    )
    return default_profile("rabbitmq").model_copy(update={"client_path": cp})


def test_queue_traffic_says_what_each_queue_carries() -> None:
    s, issues = parse_scenario(SCENARIO)
    assert s is not None, [str(i) for i in issues]
    t = queue_traffic(s)
    kinds = {q: (x.persistent, x.confirmed, x.follow_up) for q, x in t.items()}
    assert kinds == {
        "orders": (True, True, False),
        "plain": (True, False, False),
        "conf": (True, False, True),
        "stat": (False, False, True),
        "quotes": (False, True, False),
    }
    assert t["stat"].rate == pytest.approx(10.0)  # half the orders


def test_each_queue_draws_its_path_from_its_own_table() -> None:
    s, _ = parse_scenario(SCENARIO)
    assert s is not None
    d = Model(s, _profile(), 0).run().tables["deliveries"].to_pandas()
    d = d[d.outcome == "acked"]
    lowest = d.groupby("queue").latency_s.min()
    # each queue's fastest delivery sits at (or just above) its own table's floor, far from
    # the others' (the modelled stages are taken out of the table and added back)
    for queue, kind in (
        ("orders", (True, True, False)),
        ("plain", (True, False, False)),
        ("conf", (True, False, True)),
        ("stat", (False, False, True)),
        ("quotes", (False, True, False)),  # transient, confirmed (calibration revision 5)
    ):
        assert lowest[queue] == pytest.approx(FLOORS[kind], abs=0.0015), queue
