"""The Locust process as a shared server of its users' client work (issue 13 point 5):
the busy calendar, the users dealt to processes, the figure the live processes write and
calibration reads, and its effect on a fan-out whose consumers share one process."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from emulator.sim.client_cpu import ClientCpu, Processes
from emulator.sim.model import Model
from testbed.calibration.path_scenario import END, at, calibration_scenario
from testbed.calibration.path_streams import SPREAD, SPREAD_WIDTH
from testbed.core.client_path import ClientPath, CpuSplit
from testbed.core.profile import Profile, default_profile
from testbed.core.scenario_loader import parse_scenario
from testbed.observe.process_cpu import (
    MIN_SPREAD,
    SAMPLE_S,
    SPREAD_RATIO,
    ProcessUsage,
    UsageClock,
    cpu_per_op,
    cpu_split,
    generator_report,
    read_usage,
)


def test_bookings_take_the_first_gap_that_holds_them() -> None:
    cpu = ClientCpu(1.0, 1.0)
    assert [cpu.take(t, 1.0) for t in (0.0, 0.0, 0.5, 10.0, 3.5, 4.0, 9.5)] == [
        0.0, 1.0, 2.0, 10.0, 3.5, 4.5, 11.0,
    ]  # fmt: skip
    # merged: touching intervals, and the gap [3, 3.5) that no booking of 1 s can use
    assert (cpu.starts, cpu.ends) == ([0.0, 10.0], [5.5, 12.0])
    assert cpu.booked == 7.0
    assert cpu.waited == pytest.approx(1 + 1.5 + 0.5 + 1.5)


def _earliest(busy: list[tuple[float, float]], t: float, c: float) -> float:
    """Brute force: the first instant ≥ t (t or a busy end) whose [s, s+c) is free."""
    for s in sorted({t, *(e for _, e in busy if e >= t)}):
        if all(s + c <= a + 1e-12 or s >= b - 1e-12 for a, b in busy):
            return s
    raise AssertionError("unreachable")


def test_bookings_match_brute_force_in_any_order() -> None:
    rnd = random.Random(5)
    for _ in range(100):
        cpu = ClientCpu(0.3, 0.1, 0.5)
        busy: list[tuple[float, float]] = []
        for _ in range(40):
            t, c = rnd.uniform(0, 10), rnd.choice((0.3, 0.1, 0.5))
            expected = _earliest(busy, t, c)
            assert cpu.take(t, c) == pytest.approx(expected)
            busy.append((expected, expected + c))
        assert all(e < s for e, s in zip(cpu.ends, cpu.starts[1:], strict=False))
        assert cpu.booked == pytest.approx(sum(b - a for a, b in busy))
        # gaps shorter than the cheapest booking are closed
        assert all(s - e >= 0.1 for e, s in zip(cpu.ends, cpu.starts[1:], strict=False))


def test_a_zero_cost_request_gets_the_first_free_instant_and_books_nothing() -> None:
    cpu = ClientCpu(0.0, 0.0, 1.0)
    assert cpu.take(2.0, 1.0) == 2.0
    assert cpu.take(2.5, 0.0) == 3.0  # inside the busy interval: its end
    assert cpu.take(1.0, 0.0) == 1.0  # before it: at once
    assert (cpu.starts, cpu.ends, cpu.booked) == ([2.0], [3.0], 1.0)
    assert cpu.done_by(5.0, 0.5) == 5.0 and cpu.starts[-1] == 4.5


def test_old_bookings_are_dropped_so_memory_stays_bounded() -> None:
    cpu = ClientCpu(0.001, 0.001)
    for i in range(20_000):
        cpu.take(i * 0.01, 0.001)
    assert len(cpu.starts) < 1_600  # ~10 s of 100 bookings/s plus the pruning slack


def test_users_are_dealt_to_processes_in_turn() -> None:
    procs = Processes(3, (0.001, 0.001, 0.0))
    got = [procs.next() for _ in range(7)]
    assert [procs.cpus.index(c) for c in got if c is not None] == [0, 1, 2, 0, 1, 2, 0]
    assert Processes(4, None).next() is None  # a profile without the figure: no shared server
    assert Processes(4, (0.0, 0.0, 0.0)).next() is None  # measured as free
    with pytest.raises(ValueError, match="≥ 0"):
        ClientCpu(0.001, -1.0)


def test_usage_file_round_trip(tmp_path: Path) -> None:
    measured = tmp_path / "replication-0" / "measured"
    clock = UsageClock()
    clock.sample(publishes=10, deliveries=5)
    clock.write(measured, "w0-11", publishes=300, deliveries=700)
    UsageClock().write(measured, "w1-12", publishes=0, deliveries=0)
    (measured / "processes" / "torn.json").write_text("{", encoding="utf-8")
    usages = read_usage(tmp_path)
    assert [u.worker for u in usages] == ["w0-11", "w1-12"]
    assert usages[0].samples[0][2:4] == [10, 5] and usages[0].publishes == 300
    assert len(usages[0].samples[0]) == 6  # and the CPU inside publishes and deliveries' ends
    data = json.loads((measured / "processes" / "w0-11.json").read_text(encoding="utf-8"))
    assert set(data) == {"worker", "cpu_s", "wall_s", "publishes", "deliveries", "samples"}


def test_the_split_of_the_cpu_reads_the_spans_and_fits_the_rest_per_delivery() -> None:
    """0.1 core idle; a publish 0.15 ms and an ack 0.25 ms inside the spans; 0.3 ms per
    delivery outside them (socket reads, parsing): the split finds all three."""
    rng = random.Random(4)
    rates = [0.0] * 5 + [100.0] * 12 + [368.0] * 12 + [716.0] * 14 + [0.0] * 5
    out, cpu, pubs, dels, pub_s, ack_s = [[0.0] * 6], 0.0, 0, 0, 0.0, 0.0
    for i, rate in enumerate(rates, 1):
        n = int(rate)
        pubs, dels = pubs + n, dels + n
        pub_s, ack_s = pub_s + 0.00015 * n, ack_s + 0.00025 * n
        cpu += 0.1 + 0.0007 * n + rng.uniform(-0.005, 0.005)
        out.append([float(i), cpu, pubs, dels, pub_s, ack_s])
    u = ProcessUsage("w0-1", cpu, 48.0, pubs, dels, out)
    got = cpu_split([u])
    assert got is not None
    assert got.publish == pytest.approx(0.00015) and got.ack == pytest.approx(0.00025)
    assert got.receive == pytest.approx(0.0003, rel=0.1)
    assert got.publish_rest is None  # one delivery a publish: the rest is not split
    assert cpu_per_op([u]) == pytest.approx(0.00035, rel=0.05)  # the same CPU, per operation
    old = ProcessUsage("w0-2", cpu, 48.0, pubs, dels, [x[:4] for x in out])
    assert cpu_split([old]) is None  # a file from before the spans


def _spread_usage(rates: list[tuple[int, int]], rest_pub: float, rest_del: float) -> ProcessUsage:
    """A process idling at 0.1 core, spans 0.15 ms a publish and 0.25 ms an ack, and outside
    them ``rest_pub`` a publish and ``rest_del`` a delivery, at (publishes, deliveries) a second."""
    rng = random.Random(5)
    out, cpu, pubs, dels, pub_s, ack_s = [[0.0] * 6], 0.0, 0, 0, 0.0, 0.0
    for i, (p, d) in enumerate(rates, 1):
        pubs, dels = pubs + p, dels + d
        pub_s, ack_s = pub_s + 0.00015 * p, ack_s + 0.00025 * d
        cpu += 0.1 + (0.00015 + rest_pub) * p + (0.00025 + rest_del) * d
        cpu += rng.uniform(-0.005, 0.005)
        out.append([float(i), cpu, pubs, dels, pub_s, ack_s])
    return ProcessUsage("w0-1", cpu, float(len(rates)), pubs, dels, out)


def test_a_spread_of_deliveries_a_publish_splits_the_rest_between_the_two() -> None:
    """The calibration's phases deliver one message a publish, its spread stream five (the
    `path_streams.SPREAD` window): the CPU outside the spans, 0.4 ms a publish (its timer's
    wake-up) and 0.05 ms a delivery, is told apart. Without the window the same process puts
    all 0.45 ms on the delivery, which a fan-out 1→10 then pays ten times a publish."""
    load = [(0, 0)] * 5 + [(100, 100)] * 12 + [(368, 368)] * 12 + [(716, 716)] * 14
    spread = [(50, 250)] * 8
    got = cpu_split([_spread_usage(load + spread + [(0, 0)] * 3, 0.0004, 0.00005)])
    assert got is not None and got.publish_rest is not None
    assert got.publish_rest == pytest.approx(0.0004, rel=0.1)
    assert got.receive == pytest.approx(0.00005, abs=0.00002)
    assert got.publish == pytest.approx(0.00015) and got.ack == pytest.approx(0.00025)
    alone = cpu_split([_spread_usage(load + [(0, 0)] * 3, 0.0004, 0.00005)])
    assert alone is not None and alone.publish_rest is None
    assert alone.receive == pytest.approx(0.00045, rel=0.1)
    # a share that fits below zero is 0, and the other is fitted alone
    free = cpu_split([_spread_usage(load + spread, 0.0, 0.0003)])
    assert free is not None and free.publish_rest is not None
    assert free.publish_rest < 0.00002 and free.receive == pytest.approx(0.0003, rel=0.1)


def _samples(
    rates: list[float], base: float, per_op: float, rng: random.Random
) -> list[list[float]]:
    out, cpu, ops = [[0.0, 0.0, 0, 0]], 0.0, 0
    for i, rate in enumerate(rates, 1):
        n = int(rate)
        ops += n
        cpu += base + per_op * n + rng.uniform(-0.005, 0.005)  # flushes, timers: noise
        out.append([float(i), cpu, ops // 2, ops - ops // 2])
    return out


def test_the_cost_per_operation_is_the_marginal_one_not_the_ratio() -> None:
    """A process that idles at 0.1 core and spends 0.4 ms per operation: the whole-run ratio
    says ~1 ms at these rates; the fit over its samples finds the 0.4 ms (module docstring)."""
    rng = random.Random(3)
    rates = [0.0] * 5 + [100.0] * 12 + [0.0] * 2 + [368.0] * 12 + [716.0] * 14 + [0.0] * 5
    samples = _samples(rates, 0.1, 0.0004, rng)
    cpu, ops = samples[-1][1], samples[-1][2] + samples[-1][3]
    u = ProcessUsage("w0-1", cpu, 50.0, samples[-1][2], samples[-1][3], samples)
    assert cpu / ops > 0.0006  # the ratio: the idle CPU counted as work
    assert cpu_per_op([u]) == pytest.approx(0.0004, rel=0.05)
    steady = ProcessUsage("w0-2", 1, 20, 1, 1, _samples([100.0] * 20, 0.1, 0.0004, rng))
    assert cpu_per_op([steady]) is None  # one rate: time and operations cannot be told apart
    assert cpu_per_op([ProcessUsage("w0-3", 1, 5, 1, 1, samples[:5])]) is None  # too few
    assert cpu_per_op([ProcessUsage("w0-4", 1, 5, 1, 1)]) is None  # no samples at all
    fixed = ProcessUsage("w1-2", cpu_s=2.0, wall_s=10.0, publishes=10, deliveries=10)
    assert fixed.utilisation == pytest.approx(0.2)


FANOUT = """
name: fan5
seed: 3
duration: 40s
warmup: 5s
drain_timeout: 10s
workers: {workers}
topology:
  exchanges: [{{name: x, type: fanout}}]
  queues:
{queues}
producers:
  - {{name: p, exchange: x, routing_key: k, arrival: {{kind: constant, rate: 5/s}}, size: 200B}}
consumers:
{consumers}
"""


def _fanout(workers: int, service: str = "0ms") -> object:
    queues = "\n".join(
        f"    - {{name: q{i}, bindings: [{{exchange: x, key: k}}]}}" for i in range(5)
    )
    consumers = "\n".join(
        f"  - {{name: c{i}, queue: q{i}, service_time: {{kind: deterministic, value: {service}}}}}"
        for i in range(5)
    )
    s, issues = parse_scenario(FANOUT.format(workers=workers, queues=queues, consumers=consumers))
    assert s is not None, [str(i) for i in issues]
    return s


def _profile(cost: float | None, split: CpuSplit | None = None) -> Profile:
    """The shipped profile with `cost` per operation, booked as `split` says (None: all of a
    delivery's before its handler, as a profile of revision 2), without a measured copy gap
    (which would book less of the receive before a handler: tests/unit/test_sim_fanout.py)."""
    prof = default_profile("rabbitmq", "pika")
    cp = prof.client_path
    assert isinstance(cp, ClientPath)
    cp = cp.model_copy(update={"cpu_per_op": cost, "cpu": split, "copy_gap": None})
    return prof.model_copy(update={"client_path": cp})


def _spread(
    workers: int, cost: float | None, split: CpuSplit | None = None, service: str = "0ms"
) -> float:
    """Median, over published messages, of the time from the first to the last start of its
    five copies."""
    r = Model(_fanout(workers, service), _profile(cost, split), 0).run()
    d = r.tables["deliveries"].to_pandas()
    return float(d.groupby("msg_id").t_deliver.agg(lambda x: x.max() - x.min()).median())


def test_five_consumers_of_one_process_start_one_after_another() -> None:
    cost = 0.002  # larger than the delivery table's spread, so the order is the CPU's
    alone = _spread(1, None)
    shared = _spread(1, cost)
    assert shared >= 4 * cost * 0.999  # five receive works in a row, four waits
    assert alone < 2 * cost  # without the shared server the copies start independently
    assert _spread(5, cost) < shared / 2  # one consumer per process: nobody waits for another


def test_only_the_receive_work_stands_between_fanned_out_copies() -> None:
    """Split as calibration measures it, a copy waits for the others' receive work (before
    their handlers), not for their acks (after their service): the copies of one message
    start a receive apart, not a whole operation apart."""
    cost, receive = 0.002, 0.0005
    split = CpuSplit(publish=0.001, receive=receive, ack=2 * cost - receive - 0.001)
    whole = _spread(1, cost, service="20ms")
    spread = _spread(1, cost, split, service="20ms")
    assert 4 * receive * 0.999 <= spread < whole / 2
    assert whole >= 4 * cost * 0.999
    # served at once, each copy's ack comes before the next copy's receive: the ack work
    # occupies the process even though its own consumer does not wait for it
    assert _spread(1, cost, split) >= 4 * (receive + split.ack) * 0.999


def test_a_load_generator_near_a_core_is_named_in_a_warning() -> None:
    calm = ProcessUsage("w0-1", cpu_s=3.0, wall_s=10.0, publishes=10, deliveries=10)
    busy = ProcessUsage("w1-2", cpu_s=9.0, wall_s=10.0, publishes=10, deliveries=10)
    rows, warnings = generator_report([calm, busy])
    assert [r["utilisation"] for r in rows] == [0.3, 0.9]
    assert len(warnings) == 1 and "w1-2 used 90% of a core" in warnings[0]
    assert "raise `workers`" in warnings[0]


def test_the_prediction_gives_each_process_its_cpu_share_and_warns_near_a_core(
    tmp_path: Path,
) -> None:
    from emulator.predict import predict

    lines: list[str] = []
    # 5 updates/s, each one publish and five deliveries: 30 operations/s
    light = predict(_fanout(1), tmp_path / "a", profile=_profile(0.002), replications=2,
                    processes=1, progress=lines.append).summary["load_generators"]  # fmt: skip
    (share,) = light["utilisation"]
    assert share == pytest.approx(30 * 0.002, rel=0.2)  # over the run, drain included
    assert light["cpu_per_op"] == 0.002 and not any("warning" in x for x in lines)
    two = predict(_fanout(2), tmp_path / "b", profile=_profile(0.03), replications=1,
                  processes=1, progress=lines.append).summary["load_generators"]  # fmt: skip
    assert sum(two["utilisation"]) == pytest.approx(30 * 0.03, rel=0.1)  # 0.9 of a core...
    assert min(two["utilisation"]) > 0.3 and not any("warning" in x for x in lines)  # ...shared
    one = predict(_fanout(1), tmp_path / "d", profile=_profile(0.03), replications=1,
                  processes=1, progress=lines.append).summary["load_generators"]  # fmt: skip
    assert one["utilisation"][0] > 0.8
    assert any("Locust process 0" in x and "raise `workers`" in x for x in lines), lines
    none = predict(_fanout(1), tmp_path / "c", profile=_profile(None), replications=1,
                   processes=1).summary  # fmt: skip
    assert "load_generators" not in none


def test_the_calibration_scenario_ends_with_the_spread_stream_alone() -> None:
    """The spread stream (`path_streams.SPREAD`) delivers ``SPREAD_WIDTH`` copies a publish,
    after every other stream has stopped, inside the scenario's duration: the intervals
    `cpu_split` needs to tell publishes from deliveries."""
    for scale in (0.5, 1.0):
        spec = calibration_scenario("rabbitmq", "pika", scale)
        scenario, issues = parse_scenario(yaml.safe_dump(spec))
        assert scenario is not None, issues
        (spread,) = [p for p in spec["producers"] if p.get("exchange") == f"mqbed-cal-{SPREAD}"]
        start, stop = (float(spread[k].rstrip("s")) for k in ("start", "stop"))
        others = [p for p in spec["producers"] if p is not spread]
        assert all(float(p["stop"].rstrip("s")) <= start for p in others)
        assert float(spec["duration"].rstrip("s")) > stop and stop == at(END, scale)
        bound = [
            q for q in spec["topology"]["queues"]
            if {"exchange": f"mqbed-cal-{SPREAD}"} in q.get("bindings", [])
        ]  # fmt: skip
        served = {c["queue"] for c in spec["consumers"]}
        assert len(bound) == SPREAD_WIDTH and {q["name"] for q in bound} <= served
        # intervals of the window deliver SPREAD_WIDTH a publish, the cpu_split ratio's reach
        assert SPREAD_WIDTH >= SPREAD_RATIO + 1 and (stop - start) / SAMPLE_S >= MIN_SPREAD + 1
