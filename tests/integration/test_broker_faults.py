"""Broker faults and the fault timeline against real brokers of our own (`fresh_backend`).

Each test starts its own RabbitMQ (and ActiveMQ) because it kills, pauses or alarms them.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.brokers import Confirm, QueueDecl, make_adapter
from testbed.core.clock import RunClock
from testbed.core.scenario_faults import Fault
from testbed.faults.injector import LocalBrokerFaults, UnsupportedFault
from testbed.faults.proxy import FaultProxy
from testbed.faults.timeline import FaultRunner, proxied_endpoints
from testbed.observe.recorder import Recorder

from .conftest import start_or_fail
from .faultkit import DURABLE_SETTLE_S, Drainer, publish_paced

pytestmark = pytest.mark.integration
FAULT = TypeAdapter(Fault)
MakeBackend = Callable[[str], LocalBackend]


def fault(**kw: Any) -> Any:
    return FAULT.validate_python(kw)


def rabbit(fresh_backend: MakeBackend, name: str) -> tuple[LocalBackend, BrokerEndpoint]:
    backend = fresh_backend(name)
    (ep,) = start_or_fail(backend, ["rabbitmq"], label=name, detach=False)
    return backend, ep


def drain_all(
    ep: BrokerEndpoint,
    queue: str,
    idle: float = 1.0,
    limit: float = 30.0,
    declare: QueueDecl | None = None,
) -> list[str]:
    """Every message id left in `queue` (acked), until nothing came for `idle` s (at most
    `limit` s in all). `declare`: declared first, as a client does on (re)connect."""
    a = make_adapter(ep)
    a.connect()
    try:
        if declare is not None:
            a.declare([declare])
        consumer = a.consumer(queue, prefetch=1000, ack_mode="manual")
        ids: list[str] = []
        start = last = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() - start < limit:
            got = consumer.drain(0.2)
            for d in got:
                ids.append(d.msg_id)
                d.ack()
            if got:
                last = time.monotonic()
        consumer.drain(0.1)  # let the acks go out
        return ids
    finally:
        a.close()


def collect(producer: Any, want: int, timeout: float) -> list[Confirm]:
    confirms: list[Confirm] = []
    deadline = time.monotonic() + timeout
    while len(confirms) < want and time.monotonic() < deadline:
        confirms += producer.poll_confirms(0.1)
    return confirms


def test_kill_keeps_every_confirmed_persistent_message_and_loses_transient_ones(
    fresh_backend: MakeBackend,
) -> None:
    backend, ep = rabbit(fresh_backend, "kill")
    faults = LocalBrokerFaults(backend)
    a = make_adapter(ep)
    a.connect()
    a.declare([QueueDecl("durable-q", durable=True), QueueDecl("transient-q", durable=False)])
    time.sleep(DURABLE_SETTLE_S)  # a queue declared just before a crash can be lost with it
    transient = a.producer("transient-q", persistent=False, confirms=True)
    for i in range(200):
        transient.publish(b"t" * 100, msg_id=f"t{i}")
    assert sum(c.ok for c in collect(transient, 200, 10.0)) == 200

    persistent = a.producer("durable-q", persistent=True, confirms=True)
    confirms: list[Confirm] = []
    sent, error_ns = 0, 0
    killed_ns: list[int] = []  # when the kill was sent

    def kill() -> None:
        killed_ns.append(time.time_ns())
        faults.kill(ep.name)

    killer = threading.Timer(1.0, kill)
    killer.start()
    deadline = time.monotonic() + 15.0
    try:
        while time.monotonic() < deadline:
            if persistent.in_flight < 200:
                persistent.publish(b"p" * 100, msg_id=f"p{sent}")
                sent += 1
            confirms += persistent.poll_confirms(0.0)
    except a.connection_errors:
        error_ns = time.time_ns()
    killer.join()
    a.close()
    assert not backend.is_healthy(ep.name)
    # publishing ran unhindered for 1 s, then the kill (and only the kill) broke the connection
    assert killed_ns and error_ns, "the kill never reached the publisher (15 s without error)"
    assert killed_ns[0] <= error_ns < killed_ns[0] + 5e9, (killed_ns, error_ns)
    before = [c for c in confirms if c.t_ns < killed_ns[0]]
    assert all(c.ok for c in before), [c for c in before if not c.ok][:3]
    assert len(before) >= 200, f"{len(before)} confirms in the second before the kill"
    confirmed = {c.msg_id for c in confirms if c.ok}
    assert sent - 200 <= len(confirmed) <= sent, (sent, len(confirmed))  # 200: the window

    faults.start(ep.name)
    # declared again, as clients do on reconnect
    delivered = set(drain_all(ep, "durable-q", declare=QueueDecl("durable-q", durable=True)))
    lost = confirmed - delivered
    assert not lost, f"{len(lost)} confirmed messages lost, e.g. {sorted(lost)[:5]}"
    assert delivered <= {f"p{i}" for i in range(sent)}
    # gone with the node: the declare makes a new, empty one
    left = drain_all(ep, "transient-q", idle=0.5, declare=QueueDecl("transient-q", durable=False))
    assert left == []


def test_pause_shows_as_a_delivery_gap_of_the_paused_length(fresh_backend: MakeBackend) -> None:
    backend, ep = rabbit(fresh_backend, "pause")
    faults = LocalBrokerFaults(backend)
    a = make_adapter(ep)
    a.connect()
    a.declare([QueueDecl("pause-q", durable=False)])
    a.close()
    drainer = Drainer(ep, "pause-q")
    drainer.start()
    assert drainer.ready.wait(10) and drainer.error is None
    paused: dict[str, float] = {}

    def pause_for_two_seconds() -> None:
        time.sleep(1.0)
        faults.pause(ep.name)
        paused["at"] = time.time()
        time.sleep(2.0)
        faults.resume(ep.name)
        paused["until"] = time.time()

    pauser = threading.Thread(target=pause_for_two_seconds)
    pauser.start()
    publish_paced(ep, "pause-q", 800, rate=200)  # 4 s
    pauser.join()
    drainer.wait_for(800, 15.0)
    drainer.finish()
    assert drainer.error is None and len(drainer.rows) == 800
    received = [r for r, _, _ in drainer.rows]
    gaps = [(b - a, a) for a, b in zip(received, received[1:], strict=False)]
    gap, gap_start = max(gaps)
    assert 1.5 <= gap <= 2.5, gap
    assert abs(gap_start - paused["at"]) < 0.5
    assert (
        max(b - a for a, b in zip(received, received[1:], strict=False) if a > paused["until"])
        < 0.5
    )


def test_memory_and_disk_alarms_block_publishers_until_cleared(fresh_backend: MakeBackend) -> None:
    backend, ep = rabbit(fresh_backend, "alarms")
    faults = LocalBrokerFaults(backend)
    a = make_adapter(ep)
    a.connect()
    a.declare([QueueDecl("alarm-q", durable=False)])
    producer = a.producer("alarm-q", confirms=True)
    producer.publish(b"before", msg_id="before")
    assert [c.msg_id for c in collect(producer, 1, 5.0)] == ["before"]
    for alarm in ("memory_alarm", "disk_alarm"):
        raise_alarm = getattr(faults, alarm)
        raise_alarm(ep.name, True)
        for i in range(20):
            producer.publish(b"x", msg_id=f"{alarm}-{i}")
        assert collect(producer, 1, 1.5) == [], f"no confirm while the {alarm} is on"
        raise_alarm(ep.name, False)
        confirms = collect(producer, 20, 10.0)
        assert sorted(c.msg_id for c in confirms if c.ok) == sorted(
            f"{alarm}-{i}" for i in range(20)
        )
    a.close()
    assert len(drain_all(ep, "alarm-q", idle=0.5)) == 41


def read_events(measured: Path) -> list[tuple[float, str, str, dict[str, Any]]]:
    table = pq.read_table(measured / "events.parts").to_pylist()
    rows = [(r["t"], r["kind"], r["target"], json.loads(r["detail"])) for r in table]
    return sorted(rows, key=lambda r: r[0])


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_fault_runner_records_starts_and_ends_on_time(
    fresh_backend: MakeBackend, tmp_path: Path
) -> None:
    backend, ep = rabbit(fresh_backend, "runner")
    recorder = Recorder(tmp_path / "measured", worker="faults", replication=0)
    # t=0 in 6 s: time to read the alarm settings first (`prepare`: two rabbitmqctl evals, 1-2 s
    # each on a quiet machine; with 3 s the alarm started 1.1 s late in a loaded make test)
    clock = RunClock(time.time_ns() + 6_000_000_000)
    faults = [
        fault(kind="broker_pause", at=0.5, duration=1.0),
        fault(kind="latency", at=1.0, duration=1.0, side="consumers", latency="50ms"),
        # rabbitmqctl takes 1-2 s under load: the alarm must outlast setting it
        fault(kind="memory_alarm", at=2.0, duration=3.0),
        fault(kind="consumer_crash", at=1.0, target="workers"),  # the workload's, skipped
    ]
    with FaultProxy(seed=1) as proxy:
        links, endpoints = proxied_endpoints(proxy, ep, ["consumers"])
        assert links == {"consumers": ["consumers-rabbitmq0"]}
        assert endpoints["consumers"].port == proxy.port("consumers-rabbitmq0")
        runner = FaultRunner(
            faults,
            clock=clock,
            recorder=recorder,
            brokers=LocalBrokerFaults(backend),
            node_names={"broker": ep.name},
            proxy=proxy,
            links=links,
            seed=1,
            stop_at=30.0,
        ).start()
        assert wait_until(lambda: clock.now() >= 1.5, 15)
        assert [t["name"] for t in proxy.toxics("consumers-rabbitmq0")] == [
            "latency_upstream_f1",
            "latency_downstream_f1",
        ]
        assert wait_until(lambda: not runner.active and clock.now() > 5.0, 20)
        runner.stop()
        assert proxy.toxics("consumers-rabbitmq0") == []
    recorder.close()
    assert runner.errors == []
    events = read_events(tmp_path / "measured")
    assert [(k, tgt, d.get("kind")) for _, k, tgt, d in events] == [
        ("fault_start", "broker", "broker_pause"),
        ("broker_down", "broker", "broker_pause"),
        ("fault_start", "consumers", "latency"),
        ("fault_end", "broker", "broker_pause"),
        ("broker_up", "broker", "broker_pause"),
        ("fault_end", "consumers", "latency"),
        ("fault_start", "broker", "memory_alarm"),
        ("fault_end", "broker", "memory_alarm"),
    ]
    t = {(k, d["kind"]): (ts, d) for ts, k, _, d in events}
    for kind, start, end in [("broker_pause", 0.5, 1.5), ("latency", 1.0, 2.0)]:
        assert abs(t["fault_start", kind][0] - start) <= 0.1, (kind, t["fault_start", kind][0])
        assert abs(t["fault_end", kind][0] - end) <= 0.1, (kind, t["fault_end", kind][0])
    assert abs(t["broker_down", "broker_pause"][0] - 0.5) <= 0.1
    assert abs(t["broker_up", "broker_pause"][0] - 1.5) <= 0.1
    # a rabbitmqctl call takes ~1 s: the action starts on time, the row says when it took effect
    on, on_detail = t["fault_start", "memory_alarm"]
    off, off_detail = t["fault_end", "memory_alarm"]
    assert abs(on - on_detail["action_s"] - 2.0) <= 0.1, (on, on_detail)
    assert abs(off - off_detail["heal_s"] - 5.0) <= 0.1, (off, off_detail)
    latency_detail = t["fault_start", "latency"][1]
    assert latency_detail["params"]["latency"] == 0.05
    assert latency_detail["links"] == ["consumers-rabbitmq0"]
    assert t["fault_end", "broker_pause"][1]["rolled_back"] is False
    assert t["fault_start", "broker_pause"][1]["node"] == ep.name


def test_fault_runner_stop_heals_everything_mid_fault(
    fresh_backend: MakeBackend, tmp_path: Path
) -> None:
    backend = fresh_backend("rollback")
    rabbit_ep, amq_ep = start_or_fail(
        backend, ["rabbitmq", "activemq"], label="rollback", detach=False, warm=False
    )
    brokers = LocalBrokerFaults(backend)
    with pytest.raises(UnsupportedFault, match="not supported on activemq"):
        brokers.memory_alarm(amq_ep.name, True)
    node_names = {"broker0": rabbit_ep.name, "broker1": amq_ep.name}
    clock = RunClock(time.time_ns())
    faults = [
        fault(kind="broker_pause", at=0.3, duration=60, target="broker0"),
        fault(kind="broker_kill", at=0.3, duration=60, target="broker1"),
        fault(kind="partition", at=0.3, duration=60, side="producers"),
    ]
    with FaultProxy(seed=2) as proxy:
        link_port = proxy.add_link("producers-rabbitmq0", rabbit_ep.host, rabbit_ep.port)
        runner = FaultRunner(
            faults,
            clock=clock,
            recorder=None,
            brokers=brokers,
            node_names=node_names,
            proxy=proxy,
            links={"producers": ["producers-rabbitmq0"]},
            seed=2,
        ).start()
        assert wait_until(lambda: len(runner.active) == 3, 10), runner.errors
        assert not backend.is_healthy(amq_ep.name)
        assert len(proxy.toxics("producers-rabbitmq0")) == 2
        t0 = time.monotonic()
        runner.stop()
        took = time.monotonic() - t0
        assert runner.errors == [] and runner.active == []
        assert took < 30, took
        assert proxy.toxics("producers-rabbitmq0") == []
        assert backend.is_healthy(rabbit_ep.name) and backend.is_healthy(amq_ep.name)
        # both brokers serve again: RabbitMQ through the healed link, ActiveMQ after its restart
        for ep in (dataclasses.replace(rabbit_ep, port=link_port), amq_ep):
            a = make_adapter(ep)
            a.connect()
            a.declare([QueueDecl("after-q", durable=False)])
            a.close()
            publish_paced(ep, "after-q", 10, rate=1000)
            assert len(drain_all(ep, "after-q", idle=0.5)) == 10
    ends = [(tgt, d) for _, k, tgt, d in runner.events if k == "fault_end"]
    assert sorted(tgt for tgt, _ in ends) == ["broker0", "broker1", "producers"]
    assert all(d["rolled_back"] for _, d in ends)
    ups = sorted(d["node"] for _, k, _, d in runner.events if k == "broker_up")
    assert ups == sorted([rabbit_ep.name, amq_ep.name])
    # the kill's row says how long the process took to go after the signal: within its action
    (kill,) = [
        d for _, k, _, d in runner.events if k == "fault_start" and d["kind"] == "broker_kill"
    ]
    assert 0.0 < kill["teardown_s"] <= kill["action_s"] + 0.001, kill

    # an alarm in force is cleared too
    alarm = FaultRunner(
        [fault(kind="memory_alarm", at=0.0, duration=60, target="broker0")],
        clock=RunClock(time.time_ns()),
        recorder=None,
        brokers=brokers,
        node_names=node_names,
        seed=3,
    ).start()
    assert wait_until(lambda: len(alarm.active) == 1, 15), alarm.errors
    alarm.stop()
    assert alarm.errors == []
    a = make_adapter(rabbit_ep)
    a.connect()
    producer = a.producer("after-q", confirms=True)
    producer.publish(b"x", msg_id="after-alarm")
    assert [c.msg_id for c in collect(producer, 1, 5.0)] == ["after-alarm"]
    a.close()
