"""The fault timeline inside the simulator (issue 6 point 4): small scenarios whose ledger can be
computed by hand, on a zero-cost profile (no network delay, no broker time)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from emulator import analytic
from emulator.sim import faults as sim_faults
from emulator.sim.ack_journal import AckJournal
from emulator.sim.model import Model, SimResult
from testbed.analysis.qos import broker_uptime
from testbed.core import availability as core_availability
from testbed.core.availability import (
    ack_loss_seconds,
    availability_from_events,
    kill_teardown_seconds,
)
from testbed.core.faultplan import plan_crashes, plan_faults
from testbed.core.profile import Profile, RestartTime
from testbed.core.reconnect import FIRST_RETRY, next_attempt
from testbed.core.scenario_loader import parse_scenario
from testbed.core.seeds import replication_seed


@pytest.fixture
def restart_two_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 s restart and a kill whose sockets close at once, for the tests whose hand-computed
    ledgers need round numbers (only those: the others run with the shipped restart times,
    which `test_kill_uses_the_shipped_restart_time` checks, and kill teardowns)."""
    monkeypatch.setattr(core_availability, "RESTART_S", {"rabbitmq": 2.0, "activemq": 2.0})
    monkeypatch.setattr(sim_faults, "kill_teardown_seconds", lambda kind, profile=None: 0.0)


def run(text: str, rep: int = 0) -> SimResult:
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    return Model(s, Profile.zero(), rep).run()


def frames(res: SimResult) -> tuple[Any, Any, Any, Any]:
    t = res.tables
    return tuple(t[k].to_pandas() for k in ("messages", "deliveries", "timeseries", "events"))


KILL = """
name: kill
seed: 5
duration: 10s
drain_timeout: 30s
topology:
  queues: [{{name: q, durable: {durable}}}]
producers:
  - {{name: p, queue: q, arrival: {{kind: constant, rate: 10/s}}, size: 100B,
      persistent: {persistent}, confirms: {confirms}}}
consumers:
  - {{name: c, queue: q, start: 12s, ack: {ack}, prefetch: 10,
      service_time: {{kind: deterministic, value: 1ms}}}}
faults:
  - {{kind: broker_kill, at: 5s, duration: 1s}}
"""


def reconnect_at(lost_at: float, up_at: float) -> float:
    """When a client that lost the broker at ``lost_at`` is back, for a broker up from ``up_at``."""
    return next_attempt(lost_at, FIRST_RETRY, up_at)[0]


def test_reconnect_follows_the_live_backoff() -> None:
    # sleeps 0.1, 0.2, 0.4, 0.8, 1.6, 2, 2 ... before each attempt
    assert reconnect_at(5.0, 8.0) == pytest.approx(8.1)
    assert reconnect_at(0.0, 0.05) == pytest.approx(0.1)
    assert reconnect_at(0.0, 3.2) == pytest.approx(5.1)


TWO_KILLS = (
    KILL.format(durable="true", persistent="true", confirms="true", ack="after_processing")
    .replace("name: kill", "name: two-kills")
    .replace("duration: 10s", "duration: 15s")
    .replace("start: 12s, ", "")  # the consumer from the start
    + "  - {kind: broker_kill, at: 8.05s, duration: 1s}\n"
)


@pytest.mark.usefixtures("restart_two_seconds")
def test_a_client_still_retrying_keeps_its_backoff_through_the_next_kill() -> None:
    """Down 5 -> 8 s and again 8.05 -> 11.05 s. Both clients lost the broker at 5 s and try at
    5.1, 5.3, 5.7, 6.5 and 8.1 s, when it is down again, then 10.1 and 12.1 s (sleeps capped
    at 2 s): one outage of 7.1 s each, as live clients have it (qos-pc, 2026-11-28: 17.2 s
    through three kills). Starting the backoff over at the second kill had them back at
    11.15 s, and the consumer "up" at 8.1 s with the broker down."""
    res = run(TWO_KILLS)
    m, _, _, ev = frames(res)
    clients = ev[ev.kind.isin(["client_down", "client_up"])]
    rows = sorted(
        (k, tgt, round(t, 6))
        for t, k, tgt in zip(clients.t, clients.kind, clients.target, strict=True)
    )
    assert rows == [
        ("client_down", "c-0", 5.0), ("client_down", "p-0", 5.0),
        ("client_up", "c-0", 12.1), ("client_up", "p-0", 12.1),
    ]  # fmt: skip
    missed = m[m.t_publish.isna()]
    assert missed.t_intended.min() >= 5.0 and missed.t_intended.max() < 12.1
    assert len(missed) == 71  # the sends due in [5, 12.1) at 10/s from t in [0, 0.1)
    assert res.ledger.lost == 0  # persistent and confirmed: the kills lose nothing


@pytest.mark.usefixtures("restart_two_seconds")
def test_kill_under_best_effort_loses_the_queue_content_and_the_next_write() -> None:
    # 10/s from t in [0, 0.1): 50 sends before the kill at 5 s, all in the queue (the consumer
    # starts at 12 s), transient -> lost. The producer only writes (no confirms): its next send,
    # at 5.0x s, goes into the closed socket and is lost too, and only then does it learn of
    # the kill. Down 5 -> 8 s (1 s + 2 s restart); it reconnects at 8.1x s (backoff from
    # 5.0x), so the 30 sends due in between are missed; 19 after it are delivered.
    res = run(KILL.format(durable="false", persistent="false", confirms="false", ack="auto"))
    m, d, ts, ev = frames(res)
    led = res.ledger
    assert (led.sent, led.confirmed, led.delivered_unique, led.lost) == (100, 70, 19, 51)
    assert led.recovered == 0 and led.redeliveries == 0
    into_closed = m[(m.t_intended >= 5.0) & m.t_publish.notna() & (m.t_publish < 8.0)]
    assert len(into_closed) == 1 and into_closed.t_publish.iloc[0] < 5.1
    assert into_closed.t_confirm.notna().all()  # the send returned: the ledger counts it lost
    learned = ev[(ev.kind == "client_down") & (ev.target == "p-0")].t
    assert learned.tolist() == pytest.approx(into_closed.t_publish.tolist())
    missed = m[m.t_publish.isna()]
    assert len(missed) == 30 and missed.t_confirm.isna().all()
    assert missed.t_intended.min() > 5.0 and missed.t_intended.max() < 8.2
    lost = set(m[m.t_intended < 5.0].msg_id)
    assert lost.isdisjoint(set(d[d.outcome == "acked"].msg_id))
    rows = {(k, round(t, 6)) for t, k in zip(ev.t, ev.kind, strict=True)}
    assert {("fault_start", 5.0), ("broker_down", 5.0)} <= rows
    assert {("fault_end", 8.0), ("broker_up", 8.0)} <= rows
    back = ev[(ev.kind == "client_up") & (ev.target == "p-0")].t.iloc[0]
    assert back == pytest.approx(into_closed.t_publish.iloc[0] + 3.1)  # 0.1+0.2+0.4+0.8+1.6
    down = ts[(ts.t > 5.0) & (ts.t < 8.0)]
    assert len(down) >= 2 and not down.broker_up.any()
    assert ts[(ts.t > 8.5)].broker_up.all()


SHIPPED_RESTART_S = {"rabbitmq": 6.0, "activemq": 1.5}
"""The shipped start-up times (`testbed.core.broker_kinds`), written out: a kind falling back
to `DEFAULT_RESTART_S` (6 s), a patched table or one kind's figure used for the other fails."""


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_kill_uses_the_shipped_restart_time(kind: str) -> None:
    """Unpatched, a kill at 5 s for 1 s brings the broker back after 1 s plus the shipped
    restart time of its kind (`testbed.core.availability.RESTART_S`)."""
    assert core_availability.RESTART_S[kind] == SHIPPED_RESTART_S[kind]  # not patched here
    text = KILL.format(durable="false", persistent="false", confirms="false", ack="auto")
    # 15 s: RabbitMQ's broker_up (12 s) falls inside the run; a simulation that ends with the
    # broker still down writes no broker_up row at all
    text = text.replace("duration: 10s", "duration: 15s")
    res = run(text.replace("name: kill", f"name: kill\nbroker: {{kind: {kind}}}"))
    ev = frames(res)[3]
    up = ev[ev.kind == "broker_up"].t.tolist()
    assert up == [pytest.approx(5.0 + 1.0 + SHIPPED_RESTART_S[kind])], up


@pytest.mark.usefixtures("restart_two_seconds")
def test_kill_under_pcm_keeps_every_confirmed_message() -> None:
    res = run(
        KILL.format(durable="true", persistent="true", confirms="true", ack="after_processing")
    )
    m, d, _, _ = frames(res)
    led = res.ledger
    # the 50 confirmed before the kill survive the restart; nothing confirmed is lost
    assert (led.sent, led.confirmed, led.delivered_unique, led.lost) == (100, 69, 69, 0)
    assert m[m.t_publish.isna()].shape[0] == 31


def test_kill_requeues_persistent_unacked_copies_and_records_the_one_in_hand() -> None:
    text = KILL.format(durable="true", persistent="true", confirms="true", ack="after_processing")
    # a slow consumer from t=0 holds 10 unacked copies (prefetch) when the broker dies
    text = text.replace("start: 12s, ", "").replace("value: 1ms", "value: 1s")
    text = text.replace("drain_timeout: 30s", "drain_timeout: 120s")  # 69 messages at 1/s
    # the kill half-way through the fifth service (the schedule's phase is the seed's draw;
    # a kill does not move the sends before it), well clear of the acks a kill forgets
    first = frames(run(text.replace("at: 5s", "at: 9s")))[0].t_publish.min()
    kill = round(float(first) + 4.5, 6)
    res = run(text.replace("at: 5s", f"at: {kill}s"))
    _, d, _, _ = frames(res)
    crashed = d[d.outcome == "crashed"]
    # cut off when the dying broker's sockets close, the kill's teardown after the signal
    cut = kill + kill_teardown_seconds("rabbitmq")
    assert len(crashed) == 1 and crashed.t_done.iloc[0] == pytest.approx(cut)
    # 4 served before the kill; the one in hand + 9 buffered come back as redeliveries
    assert res.ledger.redeliveries == 10 and res.ledger.duplicated == 0
    assert res.ledger.lost == 0 and res.ledger.delivered_unique == res.ledger.confirmed


CRASH = """
name: crash
seed: 2
duration: 5s
drain_timeout: 60s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 100/s}, max_messages: 20, size: 100B}
consumers:
  - {name: c, queue: q, count: 1, prefetch: 5, ack: after_processing,
     service_time: {kind: deterministic, value: 1s}}
faults:
  - {kind: consumer_crash, at: 2.5s, target: c, restart_after: 1s}
"""


def test_consumer_crash_redelivers_exactly_its_unacked_copies() -> None:
    res = run(CRASH)
    _, d, _, ev = frames(res)
    # at 2.5 s: two acked, one in hand + four buffered = prefetch 5 unacked
    assert res.ledger.redeliveries == 5
    assert (d.outcome == "crashed").sum() == 1
    assert res.ledger.delivered_unique == 20 and res.ledger.lost == 0
    again = d[d.attempt > 1]
    assert again.t_deliver.min() >= 3.5  # the only consumer is back after 1 s
    starts = ev[ev.kind == "fault_start"]
    assert json.loads(starts.detail.iloc[0])["instances"] == ["c-0"]
    assert (ev.kind == "fault_end").sum() == 1


PAUSE = """
name: pause
seed: 4
duration: 10s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 100/s}, size: 100B}
consumers:
  - {name: c, queue: q, prefetch: 10, ack: after_processing,
     service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: broker_pause, at: 4s, duration: 2s}
"""


def test_pause_is_a_delivery_gap_of_the_paused_length() -> None:
    res = run(PAUSE)
    _, d, _, _ = frames(res)
    t = np.sort(d[d.outcome == "acked"].t_deliver.to_numpy())
    gaps = np.diff(t)
    i = int(np.argmax(gaps))
    assert gaps[i] == pytest.approx(2.0, abs=0.011) and t[i] == pytest.approx(4.0, abs=0.011)
    assert np.sort(gaps)[-2] < 0.02  # no other gap: the backlog flows at once after the resume
    assert res.ledger.lost == 0 and res.ledger.delivered_unique == res.ledger.sent == 1000


def test_memory_alarm_blocks_confirms_until_cleared() -> None:
    text = PAUSE.replace("broker_pause, at: 4s", "memory_alarm, at: 4s").replace(
        "size: 100B}", "size: 100B, confirms: true}"
    )
    res = run(text)
    m, _, _, ev = frames(res)
    confirmed = m.t_confirm.dropna()
    assert not ((confirmed > 4.0 + 1e-9) & (confirmed < 6.0 - 1e-9)).any()
    assert (confirmed >= 6.0 - 1e-9).any() and res.ledger.lost == 0
    assert list(ev[ev.kind.str.startswith("fault")].kind) == ["fault_start", "fault_end"]


def test_partition_of_consumers_stops_delivery_until_healed() -> None:
    text = PAUSE.replace(
        "{kind: broker_pause, at: 4s, duration: 2s}",
        "{kind: partition, at: 4s, duration: 3s, side: consumers}",
    )
    res = run(text)
    _, d, _, _ = frames(res)
    starts = d[d.outcome == "acked"].t_deliver
    assert not ((starts > 4.0 + 0.011) & (starts < 7.0)).any()
    assert (starts >= 7.0).sum() > 300  # held deliveries and the rest resume at the heal
    assert res.ledger.lost == 0 and res.ledger.delivered_unique == 1000


def test_latency_toxic_on_the_consumer_link_adds_its_latency() -> None:
    text = PAUSE.replace(
        "{kind: broker_pause, at: 4s, duration: 2s}",
        "{kind: latency, at: 4s, duration: 2s, side: consumers, direction: downstream, "
        "latency: 50ms}",
    )
    res = run(text)
    _, d, _, _ = frames(res)
    a = d[d.outcome == "acked"]
    during = a[(a.t_deliver > 4.2) & (a.t_deliver < 5.8)].latency_s
    before = a[a.t_deliver < 3.8].latency_s
    assert during.median() - before.median() == pytest.approx(0.05, abs=0.002)


STOCHASTIC = """
name: avail
seed: 9
duration: 600s
drain_timeout: 5s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 1/s}, size: 100B}
consumers:
  - {name: c, queue: q, service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: stochastic, target: broker, mttf: 4s, mttr: 1s, mode: pause}
"""


def test_stochastic_failures_replay_the_live_schedule() -> None:
    s, _ = parse_scenario(STOCHASTIC)
    assert s is not None
    res = Model(s, Profile.zero(), 0).run()
    ev = res.tables["events"].to_pandas()
    sim_downs = ev[ev.kind == "broker_down"].t.to_numpy()
    live = [e.start for e in plan_faults(s.faults, seed=s.seed, stop_at=float(s.duration))]
    assert len(sim_downs) == len(live) > 50 and np.allclose(sim_downs, live)


def test_simulated_availability_matches_the_ctmc() -> None:
    values = []
    for rep in range(6):
        res = run(STOCHASTIC, rep)
        ev = res.tables["events"].to_pandas()
        values.append(availability_from_events(ev, 0.0, 600.0))
    a = np.array(values)
    half = 2.571 * a.std(ddof=1) / np.sqrt(len(a))  # t(5) 97.5 %
    expect = analytic.availability(1 / 4.0, 0.0, 1 / 1.0, 1.0, 1.0).a  # = 4 / (4 + 1)
    assert expect == pytest.approx(0.8)
    assert abs(a.mean() - expect) <= half, (a.mean(), half)
    assert half < 0.02  # the interval is tight enough to mean something


@pytest.mark.usefixtures("restart_two_seconds")
def test_simulated_availability_with_kills_matches_the_ctmc_of_the_injected_process() -> None:
    # kills cost MTTR + restart (2 s here); the next time to failure runs from the planned
    # repair, so the mean up time is about MTTF·exp(−R/MTTF) (testbed.analysis.qos.
    # broker_uptime; 0.8578 against 0.8595 by Monte Carlo of the live schedule for 20/1/2 s)
    text = (
        STOCHASTIC.replace("mode: pause", "mode: kill")
        .replace("mttf: 4s", "mttf: 20s")
        .replace("duration: 600s", "duration: 3000s")
        .replace("rate: 1/s", "rate: 0.2/s")
    )
    values = []
    for rep in range(6):
        ev = run(text, rep).tables["events"].to_pandas()
        values.append(availability_from_events(ev, 0.0, 3000.0))
    a = np.array(values)
    half = 2.571 * a.std(ddof=1) / np.sqrt(len(a))
    up = broker_uptime(20.0, 2.0)
    expect = analytic.availability(1 / up, 0.0, 1 / (1.0 + 2.0), 1.0, 1.0).a
    assert abs(a.mean() - expect) <= half, (a.mean(), expect, half)
    assert half < 0.02


PRODUCER_CRASH = """
name: pcrash
seed: 8
duration: 10s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 10/s}, size: 100B, confirms: true}
consumers:
  - {name: c, queue: q, service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: producer_crash, at: 2s, target: p RESTART}
"""


def test_producer_crash_misses_the_sends_due_while_down() -> None:
    res = run(PRODUCER_CRASH.replace(" RESTART", ", restart_after: 1s"))
    m, _, _, ev = frames(res)
    # sends at k/10 + phase: 20 before 2 s, 10 due in [2, 3) missed, 70 after
    assert (res.ledger.sent, res.ledger.confirmed, res.ledger.delivered_unique) == (100, 90, 90)
    missed = m[m.t_publish.isna()]
    assert len(missed) == 10 and missed.t_intended.between(2.0, 3.0).all()
    assert list(ev[ev.kind.str.startswith("fault_")].kind) == ["fault_start", "fault_end"]
    assert res.ledger.lost == 0


def test_producer_crash_without_restart_stops_the_producer() -> None:
    res = run(PRODUCER_CRASH.replace(" RESTART", ""))
    assert (res.ledger.sent, res.ledger.confirmed, res.ledger.delivered_unique) == (20, 20, 20)


ACKS = """
name: acks
seed: 4
duration: 10s
topology:
  queues: [{name: q, durable: true}]
producers:
  - {name: p, queue: q, arrival: {kind: poisson, rate: 100/s}, size: 100B, persistent: true,
     confirms: true}
consumers:
  - {name: c, queue: q, count: 2, prefetch: 20, ack: after_processing,
     service_time: {kind: exponential, mean: 4ms}}
broker: {kind: rabbitmq}
faults:
  - {kind: broker_kill, at: 5s}
"""


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_a_kill_forgets_the_acks_not_yet_on_disk_a_restart_none(kind: str) -> None:
    """The broker-kill scenario's shape (emulator.sim.ack_journal): RabbitMQ's acks reach the
    disk with its next persistent write, so a kill forgets every ack after the last one — older
    than its 10 ms ack-loss window in some replications —, ActiveMQ's kill forgets the acks of
    that window. Those messages are delivered again after the restart (duplicates). A graceful
    restart forgets none. The sockets close at the signal here (kill_s 0): the teardown has a
    test of its own."""
    rt = RestartTime(mean=5.0, ack_loss_s=0.01, kill_s=0.0)
    profile = Profile.zero().model_copy(update={"restart_time": rt})
    older = 0  # replications where the last write's rule forgot an ack the window keeps
    # that needs no publish in the 10 ms before the kill: e^-1 of the replications at 100/s,
    # so 16 of them miss it with probability 0.63^16 < 0.1 % whatever the seeded draws
    for rep in range(16):
        for fault in ("broker_kill", "broker_restart"):
            text = ACKS.replace("kind: rabbitmq", f"kind: {kind}").replace("broker_kill", fault)
            s, issues = parse_scenario(text)
            assert s is not None, [str(i) for i in issues]
            res = Model(s, profile, rep).run()
            m, d = (res.tables[k].to_pandas() for k in ("messages", "deliveries"))
            first = d[(d.outcome == "acked") & (d.attempt == 1)]
            last_write = m[m.t_confirm <= 5.0].t_confirm.max()  # confirmed when on disk
            after_write = int(((first.t_done > last_write) & (first.t_done <= 5.0)).sum())
            in_window = int(first.t_done.between(5.0 - 0.01, 5.0).sum())
            forgotten = after_write if kind == "rabbitmq" else in_window
            expected = forgotten if fault == "broker_kill" else 0
            assert (res.ledger.duplicated, res.ledger.lost) == (expected, 0), (kind, rep, fault)
            older += fault == "broker_kill" and after_write > in_window
    if kind == "rabbitmq":
        assert older > 0, "no replication tells the two rules apart: test too weak"
    assert ack_loss_seconds("rabbitmq") == pytest.approx(0.01)
    assert ack_loss_seconds("activemq") == pytest.approx(0.005)


def test_without_a_write_to_go_by_the_window_decides() -> None:
    """No persistent write was tracked (no confirms): RabbitMQ's kill falls back to the
    window, and acks before the last write are kept however the window lies."""
    j = AckJournal(window=0.01, with_writes=True)
    for t in (4.97, 4.995):
        j.acked(t, "q", int(t * 1000), 1, killed=False)
    assert j.kill(5.0) == set()
    assert [m for _, m, _ in j.forgotten()] == [4995]
    j = AckJournal(window=0.01, with_writes=True)
    j.written(1, 4.96, now=4.959)
    j.written(2, 5.2, now=4.961)  # on disk after the kill: lost with it
    for t in (4.95, 4.97, 4.995):
        j.acked(t, "q", int(t * 1000), 1, killed=False)
    assert j.kill(5.0) == {2}
    assert [m for _, m, _ in j.forgotten()] == [4970, 4995]


CRASHES = """
name: crashes
seed: 4
duration: 300s
drain_timeout: 5s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 1/s}, size: 100B}
consumers:
  - {name: c, queue: q, count: 2, service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: stochastic, target: c, mttf: 20s, mttr: 2s}
"""


def test_consumer_crashes_replay_the_live_workload_plan() -> None:
    # replication 1: the simulator must use the live runner's replication seed, not s.seed
    s, _ = parse_scenario(CRASHES)
    assert s is not None
    ev = Model(s, Profile.zero(), 1).run().tables["events"].to_pandas()
    starts = ev[(ev.kind == "fault_start") & (ev.target == "c")]
    plans = sorted(plan_crashes(s, replication_seed(s.seed, 1), {"c": 2}, float(s.duration)))
    assert len(starts) == len(plans) > 10
    assert np.allclose(starts.t.to_numpy(), [p.at for p in plans])
    victims = [json.loads(d)["instances"] for d in starts.detail]
    assert victims == [[f"c-{p.instance}"] for p in plans]
    assert plans != sorted(plan_crashes(s, s.seed, {"c": 2}, float(s.duration)))


TEARDOWN = """
name: teardown
seed: 5
duration: 10s
drain_timeout: 60s
topology:
  queues: [{name: q, durable: true}]
producers:
  - {name: p, queue: q, arrival: {kind: constant, rate: 100/s}, size: 100B,
     persistent: true, confirms: true}
consumers:
  - {name: c, queue: q, ack: after_processing, prefetch: 10,
     service_time: {kind: deterministic, value: SERVICE}}
faults:
  - {kind: broker_kill, at: 5005ms, duration: 1s}
"""


def _teardown_run(service: str, kill_s: float) -> tuple[SimResult, Any, Any]:
    s, issues = parse_scenario(TEARDOWN.replace("SERVICE", service))
    assert s is not None, [str(i) for i in issues]
    rt = RestartTime(mean=2.0, ack_loss_s=0.0, kill_s=kill_s)
    res = Model(s, Profile.zero().model_copy(update={"restart_time": rt}), 0).run()
    m, d, _, _ = frames(res)
    return res, m, d


def test_until_the_dying_broker_closes_its_sockets_producers_publish_into_the_void() -> None:
    # kill at 5.005 s, sockets closed at 5.035 s: the three sends due in between (every 10 ms,
    # from a random phase) go out (a publish time, no error) and are lost in flight — three
    # unconfirmed at once, since the open-loop producer does not wait for confirms (the live
    # clients collect them asynchronously); the sends due after the cut are missed
    res, m, d = _teardown_run("1ms", 0.03)
    void = m[(m.t_publish >= 5.005) & (m.t_publish < 5.035)]
    assert len(void) == 3 and np.diff(sorted(void.t_publish)) == pytest.approx([0.01, 0.01])
    assert void.t_confirm.isna().all() and not set(void.msg_id) & set(d.msg_id)
    assert 5.035 <= m[m.t_publish.isna()].t_intended.min() < 5.045
    # without a teardown the producer is cut off at the signal: nothing goes into the void
    _, m0, _ = _teardown_run("1ms", 0.0)
    assert m0[(m0.t_publish >= 5.005) & (m0.t_publish < 5.035)].empty
    assert 5.005 <= m0[m0.t_publish.isna()].t_intended.min() < 5.015
    assert res.ledger.lost == 0  # unconfirmed publishes are not losses


def test_acks_sent_while_the_broker_dies_are_lost_with_it() -> None:
    # 20 ms per message at 100/s: the consumer always holds a buffer. During the 30 ms
    # teardown it finishes what it had in hand and the next one; their acks reach a dead
    # broker, so both come back after the restart: duplicates. Cut off at the signal instead,
    # only the one in hand is cut short (crashed) and nothing is delivered twice.
    res, _, d = _teardown_run("20ms", 0.03)
    first = d[(d.attempt == 1) & (d.outcome == "acked")]
    in_teardown = first[(first.t_done >= 5.005) & (first.t_done < 5.035)]
    assert len(in_teardown) >= 1
    assert res.ledger.duplicated == len(in_teardown)
    assert set(in_teardown.msg_id) <= set(d[d.attempt == 2].msg_id)
    res0, _, d0 = _teardown_run("20ms", 0.0)
    assert res0.ledger.duplicated == 0 and int((d0.outcome == "crashed").sum()) == 1
