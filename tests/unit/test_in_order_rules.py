"""In-order delivery, the parts that need no broker: what the topology declares, how the
adapters ask for one active consumer, the consumer's prefetch, and the visibility controller's
head-of-line hold (the live behaviour on real brokers: tests/integration/test_in_order.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.predict import PredictionError, predict
from testbed.brokers.activemq_topology import ActiveMQTopology
from testbed.brokers.base import Delivery, QueueDecl
from testbed.brokers.rabbitmq import queue_arguments
from testbed.control.visibility import VisibilityController
from testbed.core.load import offered_load
from testbed.core.scenario_loader import parse_scenario
from testbed.core.visibility import consumer_prefetch, holds_head_of_line
from testbed.workload.topology import declarations

SCENARIO = """
name: io
duration: 10s
broker: {{kind: {kind}}}
topology:
  queues:
    - {{name: ordered, visibility: {{timeout: 200ms, in_order: true}}}}
    - {{name: loose, visibility: {{timeout: 200ms}}}}
producers:
  - {{name: p, queue: ordered, arrival: {{kind: poisson, rate: 5/s}}}}
consumers:
  - {{name: c, queue: ordered, count: 2, prefetch: 20}}
"""


def _scenario(kind: str) -> Any:
    s, issues = parse_scenario(SCENARIO.format(kind=kind))
    assert s is not None, [str(i) for i in issues]
    return s


def test_an_in_order_queue_has_one_active_consumer_and_no_delay_queue() -> None:
    """RabbitMQ: the in-order queue is declared single-active-consumer and gets no
    ``.vt-delay`` queue (nothing is copied there); the out-of-order one keeps both as before."""
    decls = {d.name: d for d in declarations(_scenario("rabbitmq")) if isinstance(d, QueueDecl)}
    assert decls["ordered"].single_active_consumer
    assert not decls["loose"].single_active_consumer
    assert "ordered.vt-delay" not in decls and "loose.vt-delay" in decls
    assert {"ordered.dlq", "loose.dlq"} <= set(decls)
    assert queue_arguments(decls["ordered"]) == {"x-single-active-consumer": True}
    assert "x-single-active-consumer" not in queue_arguments(decls["loose"])


def test_activemq_consumers_of_an_in_order_queue_subscribe_exclusive() -> None:
    topo = ActiveMQTopology()
    topo.add(d for d in declarations(_scenario("activemq")))
    assert topo.subscription_headers("ordered", 1) == {
        "activemq.prefetchSize": "1",
        "activemq.exclusive": "true",
    }
    assert topo.subscription_headers("loose", 20) == {"activemq.prefetchSize": "20"}


def test_an_in_order_consumer_asks_for_prefetch_one() -> None:
    s = _scenario("rabbitmq")
    ordered, loose = (s.queue(n).visibility for n in ("ordered", "loose"))
    assert holds_head_of_line(ordered) and not holds_head_of_line(loose)
    assert not holds_head_of_line(None)
    assert consumer_prefetch(20, ordered) == 1
    assert consumer_prefetch(20, loose) == 20 and consumer_prefetch(0, None) == 0


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class _Recorder:
    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.events: list[tuple[Any, ...]] = []

    def delivery(self, *row: Any, **kw: Any) -> None:
        self.rows.append(row)

    def event(self, *row: Any) -> None:
        self.events.append(row)


def _delivery(settled: list[tuple[str, str, bool]], msg_id: str = "m1") -> Delivery:
    return Delivery(
        body=b"x",
        headers={},
        msg_id=msg_id,
        redelivered=False,
        t_publish_ns=None,
        t_receive_ns=0,
        delivery_tag=1,
        queue="ordered",
        _settle=lambda d, action, requeue: settled.append((d.msg_id, action, requeue)),
    )


def _controller(
    max_deliveries: int = 3,
) -> tuple[VisibilityController, _Clock, _Recorder, list[Any], list[Any]]:
    clock, rec = _Clock(), _Recorder()
    copies: list[Any] = []
    heads: list[Any] = []
    vc = VisibilityController(
        0.2,
        max_deliveries,
        "ordered.dlq",
        clock,  # type: ignore[arg-type]
        rec,  # type: ignore[arg-type]
        "c-0",
        lambda d, attempt, queue, delay: copies.append((d.msg_id, attempt, queue, delay)),
        requeue_head=heads.append,
    )
    return vc, clock, rec, copies, heads


def test_a_failed_attempt_holds_the_line_until_its_lease_runs_out() -> None:
    """No ack, no copy, no row while the lease runs; at its end one ``timed_out`` row stamped
    with the expiry, the delivery handed to the head of the line, and its next delivery is
    attempt 2 although the message comes back with its old headers."""
    settled: list[tuple[str, str, bool]] = []
    vc, clock, rec, copies, heads = _controller()
    d = _delivery(settled)
    clock.t = 1.0
    vc.lease(d, 1, 1.0, (1.0, 0.01, 1))
    vc.hold(d)
    clock.t = 1.19
    assert vc.tick() == 0 and rec.rows == [] and settled == [] and heads == []
    assert vc.next_expiry() == pytest.approx(1.2)
    clock.t = 1.2
    assert vc.tick() == 1
    assert heads == [d] and copies == [] and settled == []  # requeue_head settles it, not tick
    (row,) = rec.rows
    assert row[2:7] == ("c-0", 1, 1.0, 1.2, "timed_out")
    assert rec.events[0][3]["failed"] is True and rec.events[0][3]["action"] == "redeliver"
    again = _delivery(settled)  # the broker's redelivery: same id, old headers (attempt 1)
    assert vc.next_attempt(again, 1) == 2
    assert vc.next_attempt(again, 1) == 1  # used once: a later, unrelated delivery is as sent


def test_the_last_attempt_is_dead_lettered_not_requeued() -> None:
    settled: list[tuple[str, str, bool]] = []
    vc, clock, rec, copies, heads = _controller(max_deliveries=2)
    d = _delivery(settled)
    vc.lease(d, 2, 0.0, (0.0, None, 1))
    vc.hold(d)
    clock.t = 0.25
    vc.tick()
    assert copies == [("m1", 2, "ordered.dlq", 0.0)] and heads == []
    assert settled == [("m1", "ack", False)]
    assert rec.rows[0][6] == "dead_lettered"


def test_a_graceful_stop_records_the_held_attempt() -> None:
    """Closing the consumer gives the held message back to the broker: its failed attempt is
    recorded then (else the ledger would miss a redelivery's first try)."""
    settled: list[tuple[str, str, bool]] = []
    vc, clock, rec, _, heads = _controller()
    d = _delivery(settled)
    vc.lease(d, 1, 0.0, (0.0, None, 1))
    vc.hold(d)
    clock.t = 0.05
    vc.release_leases()
    assert [r[6] for r in rec.rows] == ["timed_out"] and rec.rows[0][5] == 0.05
    assert heads == [] and settled == [] and len(vc.book) == 0
    assert vc.next_attempt(_delivery(settled), 1) == 2


def test_a_slow_consumer_of_an_in_order_queue_loses_its_lease_to_the_head() -> None:
    """Processing outlives the timeout: the message goes back to the head uncopied (out of
    order it would be copied to the tail) and the late ack does not count."""
    settled: list[tuple[str, str, bool]] = []
    vc, clock, rec, copies, heads = _controller()
    d = _delivery(settled)
    vc.lease(d, 1, 0.0, (0.0, None, 1))
    clock.t = 0.3
    vc.tick()
    assert heads == [d] and copies == [] and rec.rows[0][6] == "timed_out"
    assert "failed" not in rec.events[0][3]
    assert vc.settle(d) is False


STABILITY = """
name: io-load
duration: 10s
topology:
  queues:
    - {{name: q, visibility: {{timeout: 500ms, in_order: {in_order}}}}}
producers:
  - {{name: p, queue: q, arrival: {{kind: poisson, rate: 20/s}}}}
consumers:
  - {{name: c, queue: q, count: 2, failure_probability: 0.1, service_time: 5ms}}
"""


def test_an_in_order_queue_is_as_fast_as_one_consumer_blocked_by_each_failure() -> None:
    """20/s, 5 ms service, p = 0.1, VT 500 ms: out of order two consumers are 6 % busy; in
    order one consumer serves 20 × 5 ms and each of 20 × 0.1/0.9 failed attempts a second
    holds the line 500 ms: ρ = 0.1 + 1.11 = 1.21, so the scenario warns that it is unstable."""
    loose, issues = parse_scenario(STABILITY.format(in_order="false"))
    assert loose is not None and not [i for i in issues if i.severity == "warning"]
    assert offered_load(loose)["q"].utilisation == pytest.approx(20 / 0.9 * 0.005 / 2)
    ordered, issues = parse_scenario(STABILITY.format(in_order="true"))
    assert ordered is not None
    load = offered_load(ordered)["q"]
    assert load.hold_s == 0.5
    assert load.utilisation == pytest.approx(20 * 0.005 + (20 / 0.9 - 20) * 0.5)
    (warn,) = [i for i in issues if i.severity == "warning"]
    assert "ρ = 1.21" in warn.message and "in order" in warn.message


def test_the_closed_form_refuses_an_in_order_queue(tmp_path: Path) -> None:
    """The §4 tandem is out of order: for an in-order queue the analytic method names the
    assumption instead of answering for another model."""
    s, _ = parse_scenario(STABILITY.format(in_order="true").replace("rate: 20/s", "rate: 2/s"))
    with pytest.raises(PredictionError) as err:
        predict(s, tmp_path, method="analytic")
    assert err.value.assumption == "out-of-order delivery"
