"""A crashing consumer loses what its broker already counts as delivered (docs/models.md §6).

With ``ack: auto`` the broker forgets a message once it has sent it, and it sends an auto-ack
consumer everything it has: RabbitMQ does not apply ``basic.qos`` to no-ack consumers, and
ActiveMQ acks a STOMP ``ack:auto`` delivery on dispatch, which frees its prefetch slot at once.
So a crash loses the message in hand (a ``crashed`` row) and the whole client-side buffer (no
row), far more than ``prefetch``; with manual acks the broker requeues them instead. The
expected figures are counted from the records alone, on a zero-cost profile (no network delay,
no broker time): everything published before the crash and not acked by then was with the
consumer.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

from emulator.sim.model import Model, SimResult
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario

Kind = Literal["rabbitmq", "activemq"]
T_CRASH = 1.55
PREFETCH = 5

BACKLOG = """
name: crash-loss
seed: 3
duration: 4s
drain_timeout: 60s
broker: {{kind: {kind}}}
topology:
  queues: [{{name: q}}, {{name: done}}]
producers:
  - {{name: p, queue: q, arrival: {{kind: constant, rate: 20/s}}, size: 100B}}
consumers:
  - {{name: c, queue: q, prefetch: {prefetch}, ack: {ack},
      service_time: {{kind: deterministic, value: 100ms}},
      follow_ups: [{{queue: done, message_type: done}}]}}
  - {{name: sink, queue: done, ack: auto, service_time: {{kind: deterministic, value: 0s}}}}
faults:
  - {{kind: consumer_crash, at: {at}s, target: c, restart_after: 500ms}}
"""


def run(kind: Kind, ack: str) -> SimResult:
    text = BACKLOG.format(kind=kind, ack=ack, prefetch=PREFETCH, at=T_CRASH)
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    return Model(s, Profile.zero(kind), 0).run()


def at_the_consumer(res: SimResult) -> tuple[list[str], Any, Any]:
    """Ids of the work messages published before the crash and not acked by then (oldest
    first), with the messages and deliveries frames."""
    m = res.tables["messages"].to_pandas()
    d = res.tables["deliveries"].to_pandas()
    work = m[m.queue == "q"]
    acked_by = set(d[(d.outcome == "acked") & (d.t_done <= T_CRASH)].msg_id)
    before = work[work.t_publish < T_CRASH].sort_values("t_publish")
    return [i for i in before.msg_id if i not in acked_by], m, d


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_an_auto_ack_crash_loses_the_message_in_hand_and_the_whole_buffer(kind: Kind) -> None:
    res = run(kind, "auto")
    held, m, d = at_the_consumer(res)
    assert len(held) > PREFETCH  # the backlog was all pushed: prefetch does not bound it
    assert res.ledger.lost == len(held)
    work = d[d.queue == "q"]
    assert set(held).isdisjoint(work[work.outcome == "acked"].msg_id)
    crashed = work[work.outcome == "crashed"]
    assert list(crashed.msg_id) == held[:1]  # the one in hand, recorded at the crash
    assert crashed.t_done.iloc[0] == pytest.approx(T_CRASH)
    assert crashed.t_deliver.iloc[0] < T_CRASH
    assert len(work) - (work.outcome == "acked").sum() == 1  # the buffer leaves no row
    assert res.ledger.redeliveries == 0
    # no follow-up for a lost message; the restarted consumer serves everything sent later
    acked = set(work[work.outcome == "acked"].msg_id)
    assert (m.queue == "done").sum() == len(acked)
    late = m[(m.queue == "q") & (m.t_publish >= T_CRASH)]
    assert len(late) > 0 and set(late.msg_id) <= acked


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_manual_ack_crash_loses_nothing_and_redelivers_the_prefetched(kind: Kind) -> None:
    res = run(kind, "after_processing")
    held, _, d = at_the_consumer(res)
    assert len(held) > PREFETCH
    assert res.ledger.lost == 0
    assert res.ledger.delivered_unique == res.ledger.confirmed
    again = d[(d.queue == "q") & (d.attempt > 1)]
    # the broker had pushed only `prefetch` unacked copies: exactly those come back
    assert sorted(again.msg_id) == sorted(held[:PREFETCH])
    assert (again.outcome == "acked").all()
    crashed = d[d.outcome == "crashed"]
    assert list(crashed.msg_id) == held[:1]


def test_after_receive_loses_only_the_message_in_hand() -> None:
    res = run("rabbitmq", "after_receive")
    held, _, d = at_the_consumer(res)
    # acked when its handler started, so lost; the buffered ones were not acked: requeued
    assert res.ledger.lost == 1
    assert list(d[d.outcome == "crashed"].msg_id) == held[:1]
    again = d[(d.queue == "q") & (d.attempt > 1)]
    assert sorted(again.msg_id) == sorted(held[1 : 1 + PREFETCH])
