"""Keyed consumer failures (`emulator.sim.failures`, `testbed.core.seeds.failure_uniform`):
on a queue with a visibility timeout a simulated replication fails the attempts its live twin
fails, decided by the message and the attempt, not by the order the consumer takes them in
(the live side: tests/integration/test_in_order.py)."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.sim.model import Model
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario
from testbed.core.seeds import failure_uniform, message_key, replication_seed

SCENARIO = """
name: kf
seed: 11
duration: 10s
broker: {{kind: rabbitmq}}
topology:
  queues:
    - {{name: q, visibility: {{timeout: 200ms, in_order: {in_order}}}}}
producers:
  - {{name: a, queue: q, count: 2, arrival: {{kind: poisson, rate: 10/s}}}}
consumers:
  - {{name: c, queue: q, count: {count}, service_time: 1ms, failure_probability: 0.3}}
"""


def _deliveries(text: str, replication: int) -> Any:
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    tables = Model(s, Profile.zero(), replication).run().tables
    m = tables["messages"].to_pandas().sort_values("t_intended", kind="stable")
    m["n"] = m.groupby("producer").cumcount()
    d = tables["deliveries"].to_pandas().merge(m[["msg_id", "producer", "n"]], on="msg_id")
    seed = replication_seed(11, replication)
    d["u"] = [
        failure_uniform(seed, "c", message_key("a", int(p.split("-")[1]), int(n)), int(k))
        for p, n, k in zip(d.producer, d.n, d.attempt, strict=True)
    ]
    return d


@pytest.mark.parametrize(("in_order", "count", "replication"), [("true", 1, 0), ("false", 2, 3)])
def test_a_simulated_attempt_fails_when_its_keyed_uniform_says_so(
    in_order: str, count: int, replication: int
) -> None:
    """Every failed attempt (timed out; dead-lettered, the last one allowed) has its keyed
    uniform below p = 0.3 and every acked one above:
    a stream draw in the consumer's order (the old way) would disagree on about 42 % of them.
    Redelivered attempts are keyed by their own number, so a message fails again only when
    its next uniform is low too."""
    d = _deliveries(SCENARIO.format(in_order=in_order, count=count), replication)
    assert set(d.outcome) <= {"acked", "timed_out", "dead_lettered"}
    assert (d[d.outcome != "acked"].u < 0.3).all()
    assert (d[d.outcome == "acked"].u >= 0.3).all()
    assert d.attempt.max() >= 2 and len(d) > 150


def test_the_same_messages_fail_whatever_the_consumer_count() -> None:
    """Keyed by message: two consumers instead of one fail the same first attempts (the
    producers' schedules are the same, `testbed.core.seeds.arrival_rng`)."""

    def failed(count: int) -> set[tuple[str, int]]:
        d = _deliveries(SCENARIO.format(in_order="false", count=count), 1)
        first = d[(d.attempt == 1) & (d.outcome == "timed_out")]
        return set(zip(first.producer, first.n, strict=True))

    one, two = failed(1), failed(2)
    assert len(one) > 20 and one == two
