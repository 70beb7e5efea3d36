"""Every copy in one RabbitMQ ``<queue>.vt-delay`` queue has the same TTL (docs/models.md §4).

A classic queue dead-letters an expired message only once it reaches the head, so a short TTL
behind a long one would wait for it. The live visibility timeout cannot run into that: the TTL
is the delay queue's own ``x-message-ttl`` (the VT of the one queue it serves), copies carry no
per-message ``expiration``, and the VT is set per queue, with no per-attempt backoff or per-group
value. Copies therefore expire in the order they entered, and the simulator, which makes each
failed copy visible VT after its attempt (``emulator.sim.consumers``, a timer per copy), needs
no head-of-line model. If one of these tests fails, that assumption broke: model head-only
expiry for RabbitMQ in the simulator (ActiveMQ holds copies in the consumer, per-copy timers).
"""

from __future__ import annotations

import contextlib
from typing import Any, cast

import numpy as np

from testbed.brokers.base import HDR_T_PUBLISH_NS, Delivery, Destination, QueueDecl
from testbed.brokers.kombu_rabbitmq import KombuProducer
from testbed.brokers.rabbitmq import PikaProducer, queue_arguments
from testbed.core.clock import RunClock
from testbed.core.scenario import ConsumerSpec, VisibilitySpec
from testbed.core.scenario_loader import parse_scenario
from testbed.core.visibility import delay_queue_of
from testbed.workload.consumer import ConsumerLoop
from testbed.workload.topology import declarations

SCENARIO = """
name: vt-delay
duration: 10s
broker: {{kind: {kind}}}
topology:
  queues:
    - {{name: a, visibility: {{timeout: 200ms, max_deliveries: 3}}}}
    - {{name: b, visibility: {{timeout: 1s}}}}
producers:
  - {{name: p, queue: a, arrival: {{kind: constant, rate: 10/s}}}}
consumers:
  - {{name: fast, queue: a, failure_probability: 0.5}}
  - {{name: slow, queue: a, failure_probability: 0.1,
      service_time: {{kind: deterministic, value: 50ms}}}}
  - {{name: other, queue: b}}
"""


def scenario(kind: str = "rabbitmq") -> Any:
    s, issues = parse_scenario(SCENARIO.format(kind=kind))
    assert s is not None, [str(i) for i in issues]
    return s


def test_each_delay_queue_has_one_queue_level_ttl_the_vt_of_its_queue() -> None:
    s = scenario()
    delay = {d.name: d for d in declarations(s) if isinstance(d, QueueDecl)}
    for name, vt in (("a", 0.2), ("b", 1.0)):
        d = delay[delay_queue_of(name)]
        assert (d.message_ttl, d.dead_letter_to) == (vt, name)
        args = queue_arguments(d)
        assert args["x-message-ttl"] == round(vt * 1000)
        assert (args["x-dead-letter-exchange"], args["x-dead-letter-routing-key"]) == ("", name)
    # ActiveMQ has no delay queue: the consumer holds the copy (one timer per copy)
    amq = [d.name for d in declarations(scenario("activemq")) if isinstance(d, QueueDecl)]
    assert not any(n.endswith(".vt-delay") for n in amq)


def test_the_vt_is_a_queue_setting_without_per_attempt_or_per_group_values() -> None:
    assert set(VisibilitySpec.model_fields) == {
        "timeout",
        "max_deliveries",
        "in_order",
        "dead_letter_queue",
    }
    assert not any("visib" in f or "ttl" in f for f in ConsumerSpec.model_fields)


class _Producer:
    def __init__(self, sent: list[tuple[str, dict[str, Any]]], dest: Destination) -> None:
        self.sent, self.dest = sent, dest

    def publish(self, body: bytes, **kw: Any) -> int:
        self.sent.append((self.dest.name, kw))
        return 0


class _Adapter:
    class capabilities:  # noqa: N801 - stands in for a Capabilities record
        nack_requeue = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def producer(self, dest: Destination, **_: Any) -> _Producer:
        return _Producer(self.sent, dest)


def stop() -> bool:
    return False


def test_a_failed_copy_goes_to_the_delay_queue_with_nothing_of_its_remaining_time() -> None:
    s = scenario()
    adapter = _Adapter()
    rng, recorder = np.random.default_rng(0), cast(Any, None)
    loop = ConsumerLoop(
        s.consumers[0], s, cast(Any, adapter), recorder, RunClock(0), rng, "f-0", stop
    )
    d = Delivery(b"x", {"x-mqbed-type": "t"}, "m1", False, 123, 0, 1, "a")
    loop._republish(d, 2, "a", 0.05)
    loop._republish(d, 2, "a", 0.19)
    (q1, kw1), (q2, kw2) = adapter.sent
    assert q1 == q2 == "a.vt-delay"
    assert kw1 == kw2  # the remaining lease only picks the queue; the TTL is the queue's


def test_the_rabbitmq_producers_set_no_per_message_expiration() -> None:
    calls: list[tuple[Any, ...]] = []

    class Channel:
        is_open = True

        def basic_publish(self, *args: Any, **kw: Any) -> None:
            calls.append(args)

    p = object.__new__(PikaProducer)
    p._a = type("A", (), {"translate": lambda self, _w: contextlib.nullcontext()})()
    p._ch = Channel()
    p.destination = Destination.queue("a.vt-delay")
    p.persistent, p.confirms, p.mandatory, p._tag = True, False, False, 0
    p.publish(b"x", msg_id="m1", headers={"x-mqbed-attempt": 2})
    props = calls[0][3]
    assert props.expiration is None and calls[0][1] == "a.vt-delay"

    published: list[dict[str, Any]] = []
    k = object.__new__(KombuProducer)
    k._a = type("A", (), {"generation": 0})()
    k._gen, k._channel, k.confirms, k.mandatory, k.persistent = 0, object(), False, False, True
    k.destination = Destination.queue("a.vt-delay")
    k._producer = type("P", (), {"publish": lambda self, body, **kw: published.append(kw)})()
    k._raw_publish(b"x", "m1", {HDR_T_PUBLISH_NS: 0}, "a.vt-delay")
    assert "expiration" not in published[0] and published[0]["routing_key"] == "a.vt-delay"
