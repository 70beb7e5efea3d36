"""The client-path delay model: quantile tables, their interpolation, the calibration's
extraction from records, and the simulator drawing from them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from emulator.sim.model import Model
from testbed.calibration.client_path import (
    CHAINS,
    HOLD_SERVICE,
    HOLD_UTILISATION,
    PHASES,
    calibration_scenario,
    tables_from_records,
    turnaround_points,
)
from testbed.calibration.path_scenario import at
from testbed.calibration.path_streams import CONFIRMED_TRANSIENT, FAN, FAN_SERVICE, FAN_WIDTH
from testbed.core.client_path import PROTOCOL, ClientPath, HoldPoint, PathPoint, Provenance
from testbed.core.distributions import Deterministic
from testbed.core.profile import default_profile
from testbed.core.quantiles import (
    PROBS,
    QuantileTable,
    ks_to_sample,
    mix,
    quantile_table,
    table_sampler,
)
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_table_sampler_reproduces_the_sample_and_respects_its_floor() -> None:
    rng = np.random.default_rng(1)
    sample = 0.0005 + rng.lognormal(np.log(0.0007), 0.6, 20_000)  # a shifted heavy-ish tail
    table = quantile_table(sample)
    draw = table_sampler(table, np.random.default_rng(2))
    draws = np.array([draw() for _ in range(20_000)])
    assert draws.min() >= sample.min()  # the physical floor holds
    assert ks_to_sample(table, draws) < 0.02
    # no point mass: no single value carries more than 0.1 % of the draws
    _, counts = np.unique(draws, return_counts=True)
    assert counts.max() <= 20
    assert table.mean == pytest.approx(sample.mean(), rel=0.02)


def test_table_validation_and_shift() -> None:
    with pytest.raises(ValueError):
        QuantileTable(n=3, q=[0.0, 1.0])
    with pytest.raises(ValueError):
        QuantileTable(n=3, q=[1.0] + [0.5] * (len(PROBS) - 1))
    t = quantile_table([0.001, 0.002, 0.003])
    assert t.shifted(-0.0015).q[0] == 0.0  # floored, never negative
    assert t.shifted(0.001).floor == pytest.approx(0.002)


def test_mix_is_quantile_wise() -> None:
    a = quantile_table(np.linspace(0.001, 0.002, 101))
    b = quantile_table(np.linspace(0.003, 0.006, 101))
    m = mix(a, b, 0.5)
    assert m.quantile(0.5) == pytest.approx((a.quantile(0.5) + b.quantile(0.5)) / 2)
    assert mix(a, b, -1).q == a.q and mix(a, b, 2).q == b.q


def _path(
    rate: float,
    size: float,
    lo: float,
    persistent: bool = False,
    confirms: bool = False,
    follow_up: bool = False,
) -> PathPoint:
    return PathPoint(
        rate=rate,
        size=size,
        persistent=persistent,
        confirms=confirms,
        follow_up=follow_up,
        table=quantile_table(np.linspace(lo, 2 * lo, 200)),
    )


def _client_path() -> ClientPath:
    return ClientPath(
        client="pika",
        delivery=[
            _path(50, 200, 0.001),
            _path(350, 200, 0.002),
            _path(50, 16_000, 0.003),
            _path(350, 16_000, 0.004),
        ],
        hold=[
            HoldPoint(
                rate=350, service=0.008, table=quantile_table(np.linspace(0.0008, 0.0012, 200))
            )
        ],
        provenance=Provenance(host="t", date="2026-11-24", broker_version="3.10.8", client="pika"),
    )


def test_delivery_table_interpolates_in_log_rate_and_size_and_clamps() -> None:
    cp = _client_path()
    assert cp.delivery_table(10, 200, False, 0.0).floor == pytest.approx(0.001)  # clamped
    assert cp.delivery_table(1000, 200, False, 0.0).floor == pytest.approx(0.002)
    mid = np.sqrt(50 * 350)  # halfway in log(rate)
    assert cp.delivery_table(mid, 200, False, 0.0).floor == pytest.approx(0.0015)
    assert cp.delivery_table(50, 8_100, False, 0.0).floor == pytest.approx(0.002)
    # beyond the largest size: shifted by the linear size cost
    assert cp.delivery_table(50, 116_000, False, 1e-8).floor == pytest.approx(0.004)
    # no persistent point measured: the transient ones stand in
    assert cp.delivery_table(50, 200, True, 0.0).floor == pytest.approx(0.001)
    assert cp.hold_table(10) is not None


def test_a_client_path_names_what_a_current_calibration_would_add() -> None:
    """A cached profile is measured again when an older calibration revision measured it (its
    persistent deliveries only at the high load, ActiveMQ's tables with Nagle's delay, no split
    of the client CPU) or it lacks the CPU per operation, the confirm table or the proxy hop."""
    cp = _client_path()
    assert cp.protocol == 1 and f"revision {PROTOCOL}" in (cp.missing() or "")
    assert "CPU split" in (cp.model_copy(update={"protocol": 2}).missing() or "")
    assert "confirmed" in (cp.model_copy(update={"protocol": 3}).missing() or "")
    assert "turnaround" in (cp.model_copy(update={"protocol": 4}).missing() or "")
    assert "wake-up" in (cp.model_copy(update={"protocol": 5}).missing() or "")
    cp = cp.model_copy(update={"protocol": PROTOCOL})
    assert "CPU per operation" in (cp.missing() or "")
    assert "confirm table" in (cp.model_copy(update={"cpu_per_op": 0.0}).missing() or "")
    confirm = [_path(50, 200, 0.002, persistent=True, confirms=True)]
    no_hop = cp.model_copy(update={"cpu_per_op": 0.0, "confirm": confirm})
    assert "proxy's hop" in (no_hop.missing() or "")
    hop = QuantileTable(n=10, q=[5e-5] * len(PROBS))
    assert no_hop.model_copy(update={"proxy_hop": hop}).missing() is None
    high_only = cp.model_copy(update={"delivery": [*cp.delivery, _path(350, 200, 0.003, True)]})
    assert high_only.delivery_table(50, 200, True, 0.0).floor == pytest.approx(0.003)  # clamped
    every = high_only.model_copy(
        update={"delivery": [*high_only.delivery, _path(50, 200, 0.0012, True)]}
    )
    assert every.delivery_table(50, 200, True, 0.0).floor == pytest.approx(0.0012)


def test_the_shipped_profiles_are_of_the_current_calibration() -> None:
    """`mqbed predict` without a broker falls back to them: they must carry what a current
    calibration measures (the CPU per operation, persistent points at every load level)."""
    for kind, client in (("rabbitmq", "pika"), ("rabbitmq", "kombu"), ("activemq", "stomp")):
        cp = default_profile(kind, client).client_path
        assert cp is not None and cp.missing() is None, (kind, client)
        assert cp.cpu_per_op and cp.cpu_per_op > 0, (kind, client)
        assert cp.cpu is not None and cp.cpu.receive > 0, (kind, client)
        assert {p.rate for p in cp.confirm} == {ph.total for ph in PHASES}, (kind, client)
        assert {p.rate for p in cp.turnaround} == {ph.total for ph in PHASES if ph.turn}
        assert cp.copy_gap is not None and 0 < cp.copy_gap < 0.002, (kind, client)
        assert cp.fan_delay is not None and 0 <= cp.fan_delay < 0.001, (kind, client)
        assert cp.wake and all(0 <= p.extra < 0.005 for p in cp.wake), (kind, client)
        idle_rates = {p.rate for p in cp.consumer_idle}
        assert idle_rates and idle_rates <= {ph.total for ph in PHASES}, (kind, client)
        for persistent in (False, True):
            for confirms in (False, True):
                rates = {
                    p.rate
                    for p in cp.delivery
                    if (p.persistent, p.confirms, p.follow_up) == (persistent, confirms, False)
                }
                assert rates == {ph.total for ph in PHASES}, (kind, client, confirms, rates)


def test_confirmed_persistent_messages_draw_from_their_own_table() -> None:
    """A producer that waits for confirms sends through the broker's confirmed path: its queue
    draws from the confirmed points of its persistence; a profile without them falls back to
    the unconfirmed points of that persistence."""
    cp = _client_path()
    cp = cp.model_copy(
        update={
            "delivery": [
                *cp.delivery,
                _path(50, 200, 0.0012, persistent=True),
                _path(50, 200, 0.0017, persistent=True, confirms=True),
                _path(350, 200, 0.0027, persistent=True, confirms=True),
            ]
        }
    )
    assert cp.delivery_table(50, 200, True, 0.0, confirms=True).floor == pytest.approx(0.0017)
    assert cp.delivery_table(1000, 200, True, 0.0, confirms=True).floor == pytest.approx(0.0027)
    assert cp.delivery_table(50, 200, True, 0.0).floor == pytest.approx(0.0012)
    assert cp.delivery_table(50, 200, False, 0.0, confirms=True).floor == pytest.approx(0.001)
    older = cp.model_copy(update={"delivery": [p for p in cp.delivery if not p.confirms]})
    assert older.delivery_table(50, 200, True, 0.0, confirms=True).floor == pytest.approx(0.0012)
    # revision 5 measures transient confirmed deliveries too: they draw from their own points
    cp5 = cp.model_copy(update={"delivery": [*cp.delivery, _path(50, 200, 0.0014, confirms=True)]})
    assert cp5.delivery_table(50, 200, False, 0.0, confirms=True).floor == pytest.approx(0.0014)
    assert cp5.delivery_table(50, 200, False, 0.0).floor == pytest.approx(0.001)
    assert cp5.delivery_table(50, 200, True, 0.0, confirms=True).floor == pytest.approx(0.0017)


def test_follow_ups_draw_from_the_follow_up_points_of_their_persistence() -> None:
    cp = _client_path()
    cp = cp.model_copy(
        update={
            "delivery": [
                *cp.delivery,
                _path(50, 200, 0.0012, persistent=True),
                _path(50, 200, 0.0005, follow_up=True),
                _path(50, 200, 0.0007, persistent=True, follow_up=True),
            ]
        }
    )
    assert cp.delivery_table(50, 200, False, 0.0, follow_up=True).floor == pytest.approx(0.0005)
    assert cp.delivery_table(50, 200, True, 0.0, follow_up=True).floor == pytest.approx(0.0007)
    assert cp.delivery_table(50, 200, False, 0.0).floor == pytest.approx(0.001)  # producers'
    # follow-ups never wait for confirms: the flag does not move them to the confirmed points
    both = cp.delivery_table(50, 200, True, 0.0, confirms=True, follow_up=True)
    assert both.floor == pytest.approx(0.0007)
    plain = cp.model_copy(update={"delivery": [p for p in cp.delivery if not p.follow_up]})
    assert plain.delivery_table(50, 200, True, 0.0, follow_up=True).floor == pytest.approx(0.0012)


def test_the_calibration_chains_follow_ups_from_two_delivery_consumers() -> None:
    s = Scenario.model_validate(calibration_scenario("rabbitmq", "pika"))
    for src, (to, probability, persistent) in CHAINS.items():
        c = next(c for c in s.consumers if c.queue == f"mqbed-cal-{src}")
        (f,) = c.follow_ups
        assert (f.queue, f.probability, f.persistent) == (
            f"mqbed-cal-{to}",
            probability,
            persistent,
        )
        assert any(c.queue == f"mqbed-cal-{to}" for c in s.consumers)  # a consumer of its own
    for ph in PHASES:  # the follow-ups count in the phase's total load
        assert ph.chained == pytest.approx(ph.small * 0.5 + ph.large)


def test_every_phase_measures_confirmed_deliveries_from_a_confirming_producer() -> None:
    s = Scenario.model_validate(calibration_scenario("activemq", "stomp"))
    for ph in PHASES:
        (p,) = [p for p in s.producers if p.name == f"{ph.name}-confirmed"]
        assert p.persistent and p.confirms and p.arrival.rate == pytest.approx(ph.confirmed)
        (t,) = [p for p in s.producers if p.name == f"{ph.name}-{CONFIRMED_TRANSIENT}"]
        assert not t.persistent and t.confirms
        assert t.arrival.rate == pytest.approx(ph.confirmed_transient) and ph.confirmed_transient
        others = [q for q in s.producers if q.name.startswith(ph.name) and q not in (p, t)]
        assert not any(q.confirms for q in others)  # only these streams wait for confirms
    queue = next(q for q in s.topology.queues if q.name == "mqbed-cal-confirmed")
    assert queue.durable
    transient = f"mqbed-cal-{CONFIRMED_TRANSIENT}"
    assert not next(q for q in s.topology.queues if q.name == transient).durable
    assert any(c.queue == transient for c in s.consumers)
    assert any(c.queue == "mqbed-cal-confirmed" for c in s.consumers)


def test_every_phase_measures_persistent_deliveries_at_the_same_total_load() -> None:
    s = Scenario.model_validate(calibration_scenario("rabbitmq", "pika"))
    for ph in PHASES:
        persistent = [p for p in s.producers if p.name == f"{ph.name}-persistent"]
        assert len(persistent) == 1 and persistent[0].persistent, ph
        assert persistent[0].arrival.rate == pytest.approx(ph.persistent)
        assert ph.persistent * (ph.stop - ph.start - 1) >= 80  # enough for a table
    queue = next(q for q in s.topology.queues if q.name == "mqbed-cal-persistent")
    assert queue.durable


def test_calibration_scenario_is_valid_and_loads_the_hold_consumers_to_0_6() -> None:
    s = Scenario.model_validate(calibration_scenario("rabbitmq", "kombu"))
    assert s.broker.client == "kombu"
    for ph in PHASES:
        if not ph.hold_consumers:
            continue
        hold = next(c for c in s.consumers if c.queue == f"mqbed-cal-{ph.hold_queue}")
        assert hold.service_time.kind == "exponential"  # a continuous law (module docstring)
        rho = ph.hold * (HOLD_SERVICE + 0.001) / hold.count
        assert rho == pytest.approx(HOLD_UTILISATION, abs=0.02)  # busy at times, never saturated
    # the load levels of the tables, the quiet one last (after the sparse stream)
    assert [ph.total for ph in PHASES] == [130.0, 244.0, 438.0, 30.0]
    assert {p.queue for p in s.producers} >= {"mqbed-cal-small", "mqbed-cal-large"}


def _hold_rows(rng: np.random.Generator, n: int, start: float) -> list[tuple[object, ...]]:
    """A consumer at utilisation ~0.6: exponential services, a client cost of 0.7 ms +
    U(0, 0.6) ms inside the handler and 0.1 ms from an ack to the next waiting start."""
    rows: list[tuple[object, ...]] = []
    t_arrival, free = start, start
    for i in range(n):
        t_arrival += rng.exponential(0.0135)
        begin = max(t_arrival + 0.001, free + 0.0001)
        service = rng.exponential(HOLD_SERVICE)
        done = begin + service + 0.0007 + rng.uniform(0.0, 0.0006)
        rows.append(("mqbed-cal-hold-high", "h0", f"h{i}", begin, begin - t_arrival, service, done))
        free = done
    return rows


def test_tables_from_records_measure_the_client_cost_of_each_served_message() -> None:
    rng = np.random.default_rng(3)
    high = next(ph for ph in PHASES if ph.name == "high")
    rows = []
    for i, t in enumerate(
        np.linspace(at(high.start, 1.0) + 1.1, at(high.stop, 1.0) - 0.1, 300)
    ):  # path 1-2 ms
        lat = rng.uniform(0.001, 0.002)
        rows.append(("mqbed-cal-small", "c0", f"s{i}", t + lat, lat, None, t + lat))
    rows += _hold_rows(rng, 800, at(high.start, 1.0) + 1.2)
    cols = ["queue", "consumer", "msg_id", "t_deliver", "latency_s", "service_s", "t_done"]
    d = pd.DataFrame(rows, columns=cols)
    d["outcome"] = "acked"
    paths, holds, fits = tables_from_records(d)
    assert len(paths) == 1 and paths[0].rate == high.total and paths[0].size == 200
    assert 0.001 <= paths[0].table.floor < 0.00105
    assert len(holds) == 1
    table = holds[0].table  # 0.7-1.3 ms in the handler + the 0.1 ms to a waiting start
    assert table.quantile(0.02) == pytest.approx(0.0008, abs=6e-5)
    assert table.quantile(0.98) == pytest.approx(0.0014, abs=6e-5)
    assert table.mean == pytest.approx(0.0011, abs=4e-5)
    assert {f.point for f in fits} == {"delivery/high/small", "hold/high/hold-high"}
    old = d.drop(columns="service_s")  # records without the service time: no hold table
    assert tables_from_records(old)[1] == []


def _with_client_path(kind: str = "rabbitmq"):
    return default_profile(kind).model_copy(update={"client_path": _client_path()})


def test_simulator_draws_deliveries_from_the_table() -> None:
    s = load_scenario(ROOT / "workloads/scenarios/quickstart.yaml")
    s = s.model_copy(update={"duration": 20.0, "warmup": 2.0})
    r = Model(s, _with_client_path(), 0).run()
    d = r.tables["deliveries"].to_pandas()
    acked = d[d.outcome == "acked"]
    # 200 msg/s in all: between the 50/s and 350/s tables, floors 1 ms and 2 ms; the queue
    # process and 2d are taken out of the table and added back by the model, so no latency is
    # below the interpolated floor (~1.64 ms, minus rounding)
    floor = _client_path().delivery_table(200, 1000, False, 0.0).floor
    assert acked.latency_s.min() >= floor * 0.99
    # no point mass at the floor (the old model put a third of deliveries at one value)
    assert (acked.latency_s < floor * 1.001).mean() < 0.01
    # the hold table: each consumer holds a message its service time + ~1 ms
    hold = (acked.t_done - acked.t_deliver).mean()
    assert hold == pytest.approx(0.005 + 0.001, rel=0.08)


def test_analytic_percentiles_come_from_distributions_never_the_mean() -> None:
    from emulator.closed_form import analytic_figures

    s = load_scenario(ROOT / "workloads/scenarios/quickstart.yaml")
    # consumers that serve in zero time: the latency is the path alone
    sink = s.model_copy(deep=True)
    sink.consumers[0].service_time = Deterministic(value=0.0)
    bare = default_profile("rabbitmq").model_copy(update={"client_path": None})
    assert ("latency_p50_s", None, None) not in analytic_figures(sink, bare)  # nothing known
    measured = analytic_figures(sink, _with_client_path())
    p50, p95, p99 = (measured[(f"latency_p{q}_s", None, None)] for q in (50, 95, 99))
    assert p50 < p95 < p99
    table = _client_path().delivery_table(200, 1000, False, 0.0)
    assert p99 - p50 == pytest.approx(table.quantile(0.99) - table.quantile(0.5), rel=1e-6)
    # an M/M/n station (prefetch 1): path + wait, the path's spread included
    mmn = s.model_copy(deep=True)
    mmn.consumers[0].prefetch = 1
    fig = analytic_figures(mmn, _with_client_path())
    assert fig[("latency_p50_s", None, None)] >= table.quantile(0.0)
    assert fig[("latency_p99_s", None, None)] > fig[("latency_p95_s", None, None)]


def test_delivery_consumers_are_never_busy_enough_to_queue() -> None:
    """Each zero-service consumer of a delivery stream takes at most 60 msg/s in any phase: at
    ~1 ms of client cost per message it is idle when the next one arrives (ρ ≤ 0.06)."""
    s = Scenario.model_validate(calibration_scenario("rabbitmq", "pika"))
    for stream in ("small", "large", "persistent", "confirmed"):
        group = next(c for c in s.consumers if c.queue == f"mqbed-cal-{stream}")
        peak = max(getattr(ph, stream) for ph in PHASES)
        assert peak / group.count <= 60.0, (stream, peak, group.count)
    for src, (to, probability, _) in CHAINS.items():
        group = next(c for c in s.consumers if c.queue == f"mqbed-cal-{to}")
        peak = max(getattr(ph, src) * probability for ph in PHASES)
        assert peak / group.count <= 60.0, (stream, peak, group.count)


def test_tables_from_records_keep_the_confirmed_and_chained_streams_apart() -> None:
    """The confirmed stream's deliveries become persistent points marked `confirms`, the chained
    persistent follow-ups persistent points marked `follow_up`, apart from the plain persistent
    ones of the same phase."""
    low = next(ph for ph in PHASES if ph.name == "low")
    rows = []
    streams = (
        ("persistent", 0.001),
        ("confirmed", 0.0015),
        ("chained-persistent", 6e-4),
        (CONFIRMED_TRANSIENT, 8e-4),
    )
    for stream, lat in streams:
        for i, t in enumerate(np.linspace(at(low.start, 1.0) + 1.1, at(low.stop, 1.0) - 0.1, 100)):
            rows.append((f"mqbed-cal-{stream}", "c0", f"{stream}{i}", t + lat, lat, None, t + lat))
    cols = ["queue", "consumer", "msg_id", "t_deliver", "latency_s", "service_s", "t_done"]
    d = pd.DataFrame(rows, columns=cols)
    d["outcome"] = "acked"
    paths, _, fits = tables_from_records(d)
    by = {(p.persistent, p.confirms, p.follow_up): p for p in paths}
    assert set(by) == {
        (True, False, False),
        (True, True, False),
        (True, False, True),
        (False, True, False),
    }
    assert by[(False, True, False)].table.floor == pytest.approx(0.0008)
    assert by[(True, True, False)].table.floor == pytest.approx(0.0015)
    assert by[(True, False, False)].table.floor == pytest.approx(0.001)
    assert by[(True, False, True)].table.floor == pytest.approx(0.0006)
    assert {f.point for f in fits} == {
        "delivery/low/persistent",
        "delivery/low/confirmed",
        "delivery/low/chained-persistent",
        f"delivery/low/{CONFIRMED_TRANSIENT}",
    }


def _turn_rows(rng: np.random.Generator, n: int, start: float) -> list[tuple[object, ...]]:
    """A prefetch-1 consumer at utilisation ~0.6: a message that arrives while it is busy waits
    at the broker and starts 0.3 ms + U(0, 0.2) ms after the ack; one that finds it idle starts
    1 ms after its publish."""
    rows: list[tuple[object, ...]] = []
    t_arrival, free = start, start
    for i in range(n):
        t_arrival += rng.exponential(0.015)
        waited = t_arrival < free
        begin = free + 0.0003 + rng.uniform(0.0, 0.0002) if waited else t_arrival + 0.001
        done = begin + rng.exponential(HOLD_SERVICE) + 0.0008
        rows.append(("mqbed-cal-turn-high", "t0", f"t{i}", begin, begin - t_arrival, None, done))
        free = done
    return rows


def test_turnaround_points_keep_the_ack_to_start_gaps_of_messages_that_waited() -> None:
    """Only messages published well before the previous ack count (they waited at the broker);
    the turn stream is no delivery point of its own."""
    high = next(ph for ph in PHASES if ph.name == "high")
    rows = _turn_rows(np.random.default_rng(5), 600, at(high.start, 1.0) + 1.2)
    cols = ["queue", "consumer", "msg_id", "t_deliver", "latency_s", "service_s", "t_done"]
    d = pd.DataFrame(rows, columns=cols)
    d["outcome"] = "acked"
    (point,), fits = turnaround_points(d)
    assert point.rate == high.total
    assert point.table.floor == pytest.approx(0.0003, abs=2e-6)
    assert point.table.quantile(1.0) <= 0.0005 + 1e-9  # no idle start (1 ms) among them
    assert point.table.quantile(0.5) == pytest.approx(0.0004, abs=3e-5)
    assert [f.point for f in fits] == ["turnaround/high/turn"]
    assert tables_from_records(d) == ([], [], [])
    assert turnaround_points(d[d.t_deliver < at(high.start, 1.0) + 1.5]) == ([], [])  # too few


def test_the_turnaround_consumer_takes_one_message_at_a_time_at_utilisation_0_6() -> None:
    s = Scenario.model_validate(calibration_scenario("activemq", "stomp"))
    turning = [ph for ph in PHASES if ph.turn]
    assert [ph.name for ph in turning] == ["mid", "high"]
    for ph in turning:
        (c,) = [c for c in s.consumers if c.queue == f"mqbed-cal-{ph.turn_queue}"]
        assert c.prefetch == 1 and c.count == 1 and c.ack == "after_processing"
        assert ph.turn * (HOLD_SERVICE + 0.001) == pytest.approx(HOLD_UTILISATION, abs=0.02)
        (p,) = [p for p in s.producers if p.queue == f"mqbed-cal-{ph.turn_queue}"]
        assert p.arrival.rate == pytest.approx(ph.turn)


def test_the_fan_out_stream_shares_one_process_and_sleeps_through_its_burst() -> None:
    s = Scenario.model_validate(calibration_scenario("activemq", "stomp"))
    assert s.workers == 1  # the copies' consumers share the Locust process
    assert s.routed_queues(f"mqbed-cal-{FAN}", "") == [
        f"mqbed-cal-{FAN}-{i}" for i in range(FAN_WIDTH)
    ]
    fans = [c for c in s.consumers if c.queue.startswith(f"mqbed-cal-{FAN}-")]
    assert len(fans) == FAN_WIDTH
    for c in fans:  # a constant service far longer than the burst: no ack inside it
        assert c.service_time.kind == "deterministic" and c.service_time.mean == FAN_SERVICE
        assert FAN_SERVICE > 5 * FAN_WIDTH * 0.0002  # a burst of five copies at ≤ 0.2 ms each
    (p,) = [p for p in s.producers if p.exchange == f"mqbed-cal-{FAN}"]
    low = next(ph for ph in PHASES if ph.name == "low")
    assert p.arrival.rate == pytest.approx(low.fan) and low.fan * FAN_WIDTH <= low.total


def test_the_quiet_phase_is_the_low_end_of_the_rate_axis() -> None:
    """Revision 10: deliveries of the quiet phase (after the sparse stream) give tables at its
    total rate, so a scenario below the low phase's 130 msg/s draws the quiet machine's tail,
    not the loaded one's; between the two the tables mix in log(rate)."""
    low = next(ph for ph in PHASES if ph.name == "low")
    quiet = next(ph for ph in PHASES if ph.name == "quiet")
    assert quiet.total < low.total and quiet.start > PHASES[2].stop
    rng = np.random.default_rng(11)
    rows = []
    for ph, tail in ((low, 0.004), (quiet, 0.0016)):  # p99-ish tail of each phase
        ts = np.arange(at(ph.start + 1, 1.0) + 0.005, at(ph.stop, 1.0) - 0.01, 0.004)
        for i, t in enumerate(ts):  # 4 ms apart: the machine awake, the consumer warm
            lat = tail if i % 50 == 0 else rng.uniform(0.0006, 0.0009)
            rows.append(("mqbed-cal-small", "c0", f"{ph.name}{i}", t + lat, lat, None, t + lat))
    cols = ["queue", "consumer", "msg_id", "t_deliver", "latency_s", "service_s", "t_done"]
    d = pd.DataFrame(rows, columns=cols).assign(outcome="acked")
    paths, _, fits = tables_from_records(d)
    assert sorted(p.rate for p in paths) == [quiet.total, low.total]
    assert {f.point for f in fits} == {"delivery/low/small", "delivery/quiet/small"}
    cp = ClientPath(
        client="pika",
        delivery=paths,
        provenance=Provenance(host="t", date="2026-11-29", broker_version="3.10.8", client="pika"),
    )
    at_10 = cp.delivery_table(10.0, 200, persistent=False, slope=0.0)
    at_130 = cp.delivery_table(130.0, 200, persistent=False, slope=0.0)
    assert at_10.quantile(1.0) == pytest.approx(0.0016, abs=1e-6)  # the quiet tail
    assert at_130.quantile(1.0) == pytest.approx(0.004, abs=1e-6)
    between = cp.delivery_table(float(np.sqrt(quiet.total * low.total)), 200, False, 0.0)
    assert between.quantile(1.0) == pytest.approx((0.0016 + 0.004) / 2, abs=1e-6)
