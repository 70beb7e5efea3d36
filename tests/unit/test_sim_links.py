"""The simulator's hook points (emulator/sim/links.py): every send, delivery, ack and confirm of
a simulation passes the registered links, in registration order, and the fault models use
them instead of replacing methods of the producers, broker and consumers."""

from __future__ import annotations

from typing import Any

import pytest

from emulator.sim.consumers import Consumer
from emulator.sim.links import HOOKS, Link
from emulator.sim.model import Model
from emulator.sim.producers import Producer
from emulator.sim.queues import Queue
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario

TINY = """
name: tiny
seed: 1
duration: 1s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 3/s}, size: 100B, confirms: true}
consumers:
  - {name: c, queue: q, prefetch: 1, service_time: {kind: deterministic, value: 10ms}}
"""


def model(text: str = TINY) -> Model:
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    return Model(s, Profile.zero(), 0)


class Log(Link):
    """Writes down every hook call as (hook, message, time)."""

    def __init__(self, m: Model) -> None:
        self.m = m
        self.calls: list[tuple[str, int, float]] = []

    def _log(self, hook: str, msg: int) -> None:
        self.calls.append((hook, msg, self.m.kernel.now))

    def send(self, p: Producer, t_int: float, now: float) -> int | None:
        self._log("send", -1)
        return None

    def sent(self, p: Producer, msg: int) -> None:
        self._log("sent", msg)

    def upstream(self, sender: Any, msg: int, extra: float) -> float:
        self._log("upstream", msg)
        return extra

    def accept(self, sender: Any, msg: int, queues: Any, notify: int, persistent: bool) -> bool:
        self._log("accept", msg)
        return True

    def confirm(self, p: Producer, value: tuple[int, int]) -> bool:
        self._log("confirm", value[0])
        return True

    def deliver(self, c: Consumer, q: Queue, msg: int, attempt: int, t_disp: float) -> float:
        self._log("deliver", msg)
        return t_disp

    def delivered(
        self, c: Consumer, q: Queue, msg: int, attempt: int, t_disp: float, free0: float
    ) -> None:
        self._log("delivered", msg)

    def ack(self, c: Consumer, t: float) -> float:
        self._log("ack", -1)
        return t

    def record(self, c: Consumer, msg: int, attempt: int, out: int) -> None:
        self._log("record", msg)


def test_a_link_sees_every_send_delivery_ack_and_confirm_in_order() -> None:
    m = model()
    log = Log(m)
    m.add_link(log)
    res = m.run()
    assert res.ledger.sent == res.ledger.confirmed == res.ledger.delivered_unique == 3
    calls = log.calls
    assert {h for h, _, _ in calls} == set(HOOKS) - {"confirm_delay"}
    for msg in range(3):  # one message at a time (3/s, served in 10 ms): its path in order
        mine = [h for h, x, _ in calls if x == msg]
        assert mine == ["upstream", "sent", "accept", "deliver", "delivered", "confirm", "record"]
    per_message = [h for h, _, _ in calls]
    assert per_message == 3 * [
        "send", "upstream", "sent", "accept", "deliver", "ack", "delivered", "confirm", "record"
    ]  # fmt: skip
    times = [t for _, _, t in calls]
    assert times == sorted(times)


def test_a_link_that_changes_nothing_changes_no_prediction() -> None:
    text = TINY.replace("duration: 1s", "duration: 5s").replace("3/s", "200/s")
    plain = model(text).run().tables
    m = model(text)
    m.add_link(Log(m))
    linked = m.run().tables
    for name in ("messages", "deliveries", "events"):
        assert linked[name].equals(plain[name]), name


class Delay(Link):
    """A toxic on the delivery path: adds ``s`` seconds, and notes the time it was given."""

    def __init__(self, s: float, seen: list[tuple[float, float]], refuse: bool = False) -> None:
        self.s, self.seen, self.refuse = s, seen, refuse

    def deliver(self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float) -> float:
        self.seen.append((self.s, t_disp))
        return t_disp + self.s

    def accept(self, sender: Any, m: int, queues: Any, notify: int, persistent: bool) -> bool:
        self.seen.append((self.s, -1.0))
        return not self.refuse


def test_links_compose_in_registration_order() -> None:
    m = model()
    seen: list[tuple[float, float]] = []
    m.add_link(Delay(0.01, seen))
    m.add_link(Delay(0.02, seen))
    tables = m.run().tables
    deliveries = [x for x in seen if x[1] >= 0]
    # the second link gets the time the first one made; both delays add up
    assert [s for s, _ in deliveries] == [0.01, 0.02] * 3
    for (_, t1), (_, t2) in zip(deliveries[::2], deliveries[1::2], strict=True):
        assert t2 == pytest.approx(t1 + 0.01)
    d = tables["deliveries"].to_pandas()
    assert d.latency_s.round(6).tolist() == [0.03] * 3  # publish -> handler start


def test_a_gate_stops_at_the_first_link_that_takes_the_event() -> None:
    m = model(TINY.replace("confirms: true", "confirms: false"))  # no confirm to wait for
    seen: list[tuple[float, float]] = []
    m.add_link(Delay(0.01, seen, refuse=True))
    m.add_link(Delay(0.02, seen))
    res = m.run()
    assert [s for s, t in seen if t < 0] == [0.01] * 3  # the second link never sees them
    assert res.ledger.delivered_unique == 0


FAULTS = (
    TINY.replace("duration: 1s", "duration: 3s")
    + """
faults:
  - {kind: broker_kill, at: 1s, duration: 100ms}
  - {kind: latency, at: 2s, duration: 500ms, side: consumers, latency: 20ms}
  - {kind: consumer_crash, at: 2.6s, target: c, restart_after: 100ms}
"""
)


def test_the_fault_timeline_registers_hooks_and_replaces_no_method() -> None:
    m = model(FAULTS)
    fs = m.faults
    assert fs is not None
    assert m.links.links == [fs, fs.net]  # broker and client faults, then the toxics
    objects: list[Any] = [m.broker, *m.producers, *m.consumers]
    for x in objects:
        assert x.link is m.links
        replaced = {k for k, v in vars(x).items() if callable(v) and hasattr(type(x), k)}
        assert not replaced, (x, replaced)
    assert m.run().ledger.sent > 0


def test_without_faults_the_objects_hold_no_link() -> None:
    m = model()
    assert not m.links and m.link is None
    assert m.broker.link is None
    assert all(x.link is None for x in [*m.producers, *m.consumers])
