"""The client path's confirm table (docs/models.md §9) and what it means for a kill (§6).

A confirmed persistent publish is confirmed at a time drawn from the measured publish → confirm
table, never earlier than the broker's own stage allows; the broker has the message on disk when
it sends that confirm, and a kill before then loses it (unconfirmed, never delivered) — as the
live RabbitMQ broker-kill runs lost the messages still waiting for their confirm at the kill.
A broken implementation predicts a point mass (the old constant persistence cost), or keeps
every persistent message across a kill.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sim.model import Model
from testbed.calibration.client_path import PHASES
from testbed.calibration.confirm_path import confirm_points
from testbed.calibration.path_scenario import at
from testbed.core.client_path import ClientPath, PathPoint, Provenance
from testbed.core.profile import Profile
from testbed.core.quantiles import quantile_table
from testbed.core.scenario_loader import parse_scenario

SCENARIO = """
name: confirm-path
duration: 20s
warmup: 1s
topology:
  queues: [{name: q, durable: true}]
producers:
  - {name: p, queue: q, arrival: {kind: poisson, rate: 50/s}, size: 200B,
     persistent: true, confirms: true}
consumers:
  - {name: c, queue: q}
"""


def test_confirm_points_come_from_the_confirmed_stream_per_phase() -> None:
    rng = np.random.default_rng(1)
    rows = []
    for ph in PHASES:
        for t in np.linspace(at(ph.start, 1.0) + 1.1, at(ph.stop, 1.0) - 0.1, 120):
            rows.append(("mqbed-cal-confirmed", t, t + 0.002 + rng.uniform(0, 0.001)))
            rows.append(("mqbed-cal-small", t, None))  # not confirmed: left out
    sends = pd.DataFrame(rows, columns=["queue", "t_publish", "t_confirm"])
    points, fits = confirm_points(sends, 1.0)
    assert sorted(p.rate for p in points) == sorted(ph.total for ph in PHASES)
    for p in points:
        assert p.persistent and p.confirms
        assert p.table.floor >= 0.002 and p.table.quantile(1.0) <= 0.003 + 1e-9
    assert {f.point for f in fits} == {f"confirm/{ph.name}/confirmed" for ph in PHASES}


def _profile(lo: float, hi: float) -> Profile:
    table = quantile_table(np.random.default_rng(2).uniform(lo, hi, 5000))
    delivery = PathPoint(rate=50, size=200, table=quantile_table(np.full(100, 0.0005)))
    cp = ClientPath(
        client="pika",
        delivery=[delivery],
        confirm=[PathPoint(rate=50, size=200, persistent=True, confirms=True, table=table)],
        provenance=Provenance(host="t", date="2026-11-26", broker_version="3.10.8", client="pika"),
    )
    return Profile.zero().model_copy(update={"client_path": cp})


def test_a_confirmed_persistent_publish_is_confirmed_from_the_measured_table() -> None:
    s, issues = parse_scenario(SCENARIO)
    assert s is not None, [str(i) for i in issues]
    m = Model(s, _profile(0.002, 0.006), 0).run().tables["messages"].to_pandas()
    rt = (m.t_confirm - m.t_publish).dropna()
    assert len(rt) > 500
    # the table's spread, not a point mass: uniform 2-6 ms
    assert rt.min() >= 0.002 - 1e-9 and rt.max() <= 0.006 + 1e-6
    assert rt.quantile(0.1) == pytest.approx(0.0024, abs=3e-4)
    assert rt.quantile(0.9) == pytest.approx(0.0056, abs=3e-4)
    _, counts = np.unique(rt.round(9), return_counts=True)
    assert counts.max() <= 3


def test_a_kill_loses_the_messages_whose_confirm_was_not_sent_yet() -> None:
    """Confirms 150-200 ms after the publish, one publish every 250 ms, a kill ~9.8 s: the
    last publish within 150 ms of the kill is not on disk then (its confirm was not sent) —
    lost, never confirmed, so the ledger does not count it lost; the one before, more than
    200 ms before the kill, was written and is delivered after the restart."""
    text = SCENARIO.replace("{kind: poisson, rate: 50/s}", "{kind: constant, rate: 4/s}")
    # a consumer a little slower than the producer: both are still queued at the kill
    text = text.replace(
        "{name: c, queue: q}", "{name: c, queue: q, prefetch: 1, service_time: 300ms}"
    )
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    # the kill 0.1 s after a publish near 9.75 s (the schedule's phase is the seed's draw; a
    # kill does not move the send times before it)
    sent = Model(s, _profile(0.15, 0.2), 0).run().tables["messages"].to_pandas().t_publish
    kill = round(float(sent[sent >= 9.6].min()) + 0.1, 6)
    s, issues = parse_scenario(
        text + f"faults:\n  - {{kind: broker_kill, at: {kill}s, duration: 1s}}\n"
    )
    assert s is not None, [str(i) for i in issues]
    res = Model(s, _profile(0.15, 0.2), 0).run()
    m = res.tables["messages"].to_pandas()
    delivered = set(res.tables["deliveries"].to_pandas().msg_id)
    (late,) = m[m.t_publish.between(kill - 0.15, kill)].itertuples()
    (early,) = m[m.t_publish.between(kill - 0.45, kill - 0.2)].itertuples()
    assert late.msg_id not in delivered and np.isnan(late.t_confirm)
    assert early.msg_id in delivered and early.t_confirm < kill
    assert res.ledger.lost == 0
