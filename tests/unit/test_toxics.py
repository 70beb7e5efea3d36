"""Fault proxy toxics and fault planning, with plain numbers (no network, no brokers)."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from testbed.core.faultplan import network_toxics, plan_faults, stochastic_schedule
from testbed.core.scenario_faults import Fault
from testbed.exceptions import FaultError
from testbed.faults.injector import supported
from testbed.faults.schedule import check_faults, links_for, needs_proxy
from testbed.faults.toxic_spec import ToxicError, applies, parse_toxic
from testbed.faults.toxics import Chunk, make_toxic

FAULT = TypeAdapter(Fault)


def fault(**kw: Any) -> Any:
    return FAULT.validate_python(kw)


# --- parsing ----------------------------------------------------------------------------------


def test_parse_fills_toxiproxy_defaults() -> None:
    spec = parse_toxic({"type": "latency", "attributes": {"latency": 50}})
    assert spec.name == "latency_downstream"
    assert spec.stream == "downstream"
    assert spec.toxicity == 1.0
    assert dict(spec.attributes) == {"latency": 50, "jitter": 0}
    assert spec.to_json() == {
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": 50, "jitter": 0},
    }
    loss = parse_toxic({"type": "loss", "stream": "upstream", "attributes": {"probability": 0.1}})
    assert loss.attributes["retransmit_delay"] == 200
    assert parse_toxic({"type": "down"}).attributes["mode"] == "refuse"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"type": "latncy"}, "unknown toxic type 'latncy'"),
        ({"type": "latency", "stream": "sideways"}, "got 'sideways'"),
        ({"type": "latency", "attributes": {"delay": 5}}, "latency does not take ['delay']"),
        ({"type": "latency", "attributes": {"latency": -1}}, "latency: must be ≥ 0, got -1"),
        ({"type": "latency", "attributes": {"latency": "50ms"}}, "expected a number, got '50ms'"),
        ({"type": "latency", "attributes": {"latency": True}}, "expected a number, got True"),
        ({"type": "latency", "toxicity": 1.5}, "toxicity: must be 0..1, got 1.5"),
        ({"type": "loss", "attributes": {"probability": 2}}, "probability: must be 0..1, got 2"),
        ({"type": "down", "attributes": {"mode": "drop"}}, "got 'drop'"),
        ({"type": "down", "toxicity": 0.5}, "toxicity must be 1.0, got 0.5"),
        ({"type": "slicer", "attributes": {"average_size": 0}}, "average_size: slicer needs"),
        ({"type": "latency", "colour": "red"}, "unknown key(s) ['colour']"),
        ({"type": "latency", "name": "a/b"}, "got 'a/b'"),
    ],
)
def test_parse_errors_name_the_bad_value(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ToxicError) as err:
        parse_toxic(data, where="proxies/x/toxics")
    assert message in str(err.value)
    assert "proxies/x/toxics" in str(err.value)


# --- toxicity ---------------------------------------------------------------------------------


def test_toxicity_draws_are_seeded_and_have_the_right_frequency() -> None:
    draws = [applies(0.3, random.Random(f"7:link:{i}")) for i in range(20_000)]
    again = [applies(0.3, random.Random(f"7:link:{i}")) for i in range(20_000)]
    assert draws == again
    freq = sum(draws) / len(draws)
    assert abs(freq - 0.3) < 4 * math.sqrt(0.3 * 0.7 / len(draws))
    rng = random.Random(1)
    assert not any(applies(0.0, rng) for _ in range(1000))
    assert all(applies(1.0, rng) for _ in range(1000))


class Conn:
    """What a toxic may do to its connection, remembered (a plain test double)."""

    def __init__(self) -> None:
        self.closed: list[str] = []
        self.resets: list[str] = []
        self.holds: list[tuple[str, int]] = []

    def close(self, reason: str) -> None:
        self.closed.append(reason)

    def reset(self, reason: str) -> None:
        self.resets.append(reason)

    def hold(self, stream: str, delta: int) -> None:
        self.holds.append((stream, delta))


def run_toxic(data: dict[str, Any], chunks: list[bytes], *, gap: float = 0.0, seed: int = 1):
    """Feed `chunks` (spaced by `gap` s) through one toxic; (arrival, emit time, bytes) each."""

    async def main() -> tuple[list[tuple[float, float, bytes]], Conn]:
        loop = asyncio.get_running_loop()
        conn = Conn()
        toxic = make_toxic(parse_toxic(data), random.Random(seed), conn, loop)
        assert toxic is not None
        toxic.start()
        out: list[tuple[float, float, bytes]] = []
        for i, data_ in enumerate(chunks):
            arrived = loop.time()

            async def emit(c: Chunk, arrived: float = arrived) -> None:
                out.append((arrived, loop.time(), c.data))

            await toxic.pipe(Chunk(data_, arrived), emit)
            if gap and i < len(chunks) - 1:
                await asyncio.sleep(gap)
        await asyncio.sleep(0.05)
        toxic.stop()
        return out, conn

    return asyncio.run(main())


def test_latency_is_added_per_chunk_from_its_arrival() -> None:
    out, _ = run_toxic({"type": "latency", "attributes": {"latency": 30}}, [b"a", b"b", b"c"])
    delays = [emit - arrived for arrived, emit, _ in out]
    assert [d for _, _, d in out] == [b"a", b"b", b"c"]
    # each chunk 30 ms after its own arrival, not after the previous one's (that gives 30/60/90);
    # the slack above is for a loaded machine (the suite runs in two workers on 2 cores)
    assert all(0.029 <= d < 0.058 for d in delays), delays


def test_bandwidth_paces_bytes() -> None:
    # 100 KB/s, 10 chunks of 2,000 B → 20,000 B take 0.2 s
    out, _ = run_toxic({"type": "bandwidth", "attributes": {"rate": 100}}, [b"x" * 2000] * 10)
    start = out[0][0]
    elapsed = out[-1][1] - start
    assert sum(len(d) for _, _, d in out) == 20_000
    assert 0.195 <= elapsed < 0.3, elapsed


def test_slicer_cuts_into_pieces_of_average_size() -> None:
    attrs = {"average_size": 10, "size_variation": 4, "delay": 0}
    out, _ = run_toxic({"type": "slicer", "attributes": attrs}, [bytes(range(200))])
    sizes = [len(d) for _, _, d in out]
    assert b"".join(d for _, _, d in out) == bytes(range(200))
    assert all(1 <= s <= 14 for s in sizes)
    assert 14 <= len(sizes) <= 34


def test_limit_data_passes_the_limit_then_closes() -> None:
    out, conn = run_toxic({"type": "limit_data", "attributes": {"bytes": 25}}, [b"x" * 10] * 5)
    assert b"".join(d for _, _, d in out) == b"x" * 25
    assert conn.closed and "25 bytes" in conn.closed[0]


def test_timeout_drops_data_and_closes_after_the_timeout() -> None:
    out, conn = run_toxic({"type": "timeout", "attributes": {"timeout": 20}}, [b"x"] * 3, gap=0.01)
    assert out == []
    assert conn.closed, "closed after 20 ms"


def test_reset_peer_resets_after_the_timeout_and_passes_data_before() -> None:
    out, conn = run_toxic({"type": "reset_peer", "attributes": {"timeout": 20}}, [b"x"] * 2)
    assert len(out) == 2
    assert conn.resets


def test_blackhole_holds_the_stream_until_removed() -> None:
    async def main() -> tuple[list[bytes], Conn, bool]:
        loop = asyncio.get_running_loop()
        conn = Conn()
        spec = parse_toxic(
            {"type": "down", "stream": "upstream", "attributes": {"mode": "blackhole"}}
        )
        toxic = make_toxic(spec, random.Random(1), conn, loop)
        assert toxic is not None
        toxic.start()
        out: list[bytes] = []

        async def emit(c: Chunk) -> None:
            out.append(c.data)

        task = loop.create_task(toxic.pipe(Chunk(b"held", loop.time()), emit))
        await asyncio.sleep(0.05)
        held = out == []
        toxic.stop()
        await asyncio.wait_for(task, 1.0)
        return out, conn, held

    out, conn, held = asyncio.run(main())
    assert held and out == [b"held"]
    assert conn.holds == [("upstream", 1), ("upstream", -1)]


def test_refusal_is_the_links_business_not_a_connections() -> None:
    spec = parse_toxic({"type": "down", "attributes": {"mode": "refuse"}})
    assert spec.refuses
    assert make_toxic(spec, random.Random(1), Conn(), asyncio.new_event_loop()) is None


def test_loss_holds_a_fraction_of_chunks_for_the_retransmit_delay() -> None:
    attrs = {"probability": 0.25, "retransmit_delay": 20}
    out, _ = run_toxic({"type": "loss", "attributes": attrs}, [b"x"] * 200, seed=3)
    held = [emit - arrived >= 0.019 for arrived, emit, _ in out]
    # binomial(200, 0.25): mean 50, sd 6.1
    assert 50 - 4 * 6.2 < sum(held) < 50 + 4 * 6.2


# --- planning -----------------------------------------------------------------------------------


def test_stochastic_schedule_statistics() -> None:
    f = fault(kind="stochastic", target="broker", mttf=2.0, mttr=0.5, at=10.0)
    episodes = stochastic_schedule(f, np.random.default_rng(42), 40_000.0)
    assert episodes == stochastic_schedule(f, np.random.default_rng(42), 40_000.0)
    downs = np.array([up - down for down, up in episodes])
    ups = np.diff([10.0] + [t for ep in episodes for t in ep])[0::2]
    n = len(episodes)
    assert 15_000 < n < 17_000  # 39,990 s / 2.5 s ≈ 16,000
    assert abs(ups.mean() - 2.0) < 4 * 2.0 / math.sqrt(n)
    assert abs(downs.mean() - 0.5) < 4 * 0.5 / math.sqrt(n)
    availability = ups.sum() / (ups.sum() + downs.sum())
    assert abs(availability - 0.8) < 0.01
    assert episodes[0][0] > 10.0
    assert all(a < b for a, b in episodes)
    assert all(b <= c for (_, b), (c, _) in zip(episodes, episodes[1:], strict=False))


def test_stochastic_schedule_respects_until_and_needs_an_end() -> None:
    f = fault(kind="stochastic", target="broker", mttf=1.0, mttr=0.1, until=50.0)
    episodes = stochastic_schedule(f, np.random.default_rng(1), 1e9)
    assert episodes and all(down < 50.0 for down, _ in episodes)
    open_ended = fault(kind="stochastic", target="broker", mttf=1.0, mttr=0.1)
    with pytest.raises(FaultError, match="needs .until. or a finite stop"):
        stochastic_schedule(open_ended, np.random.default_rng(1), math.inf)


def test_network_toxics_convert_scenario_units_to_toxiproxy_units() -> None:
    lat = fault(kind="latency", at=1, duration=2, side="consumers", latency="50ms", jitter="5ms")
    (up, down) = network_toxics(lat, "f0")
    assert up["stream"] == "upstream" and down["stream"] == "downstream"
    assert down == {
        "name": "latency_downstream_f0",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": 50.0, "jitter": 5.0},
    }
    bw = fault(kind="bandwidth", at=0, duration=1, rate="200KB", direction="downstream")
    assert network_toxics(bw, "f1")[0]["attributes"] == {"rate": 200.0}
    sl = fault(kind="slicer", at=0, duration=1, average_size=64, delay="2ms", direction="upstream")
    assert network_toxics(sl, "f2")[0]["attributes"] == {
        "average_size": 64,
        "size_variation": 0,
        "delay": 2000.0,
    }
    part = fault(kind="partition", at=0, duration=1)
    assert [t["attributes"] for t in network_toxics(part, "f3")] == [{"mode": "blackhole"}] * 2
    refuse = fault(kind="partition", at=0, duration=1, mode="refuse")
    assert len(network_toxics(refuse, "f4")) == 1
    loss = fault(kind="loss", at=0, duration=1, probability=0.1, toxicity=0.5)
    (lu, _ld) = network_toxics(loss, "f5")
    assert lu["attributes"] == {"probability": 0.1, "retransmit_delay": 200}
    assert lu["toxicity"] == 0.5
    for toxic in network_toxics(lat, "x") + network_toxics(loss, "y"):
        parse_toxic(toxic)  # what the planner makes, the proxy accepts


def test_plan_clips_at_stop_and_leaves_client_faults_to_the_workload() -> None:
    faults = [
        fault(kind="broker_kill", at=5, duration=0),
        fault(kind="broker_pause", at=8, duration=10),
        fault(kind="latency", at=1, duration=2, side="producers", latency=0.01),
        fault(kind="consumer_crash", at=3, target="workers"),
        fault(kind="stochastic", target="workers", mttf=1, mttr=1),
        fault(kind="memory_alarm", at=20, duration=1),
        fault(kind="stochastic", target="broker", mttf=3, mttr=1, mode="pause"),
    ]
    plan = plan_faults(faults, seed=3, stop_at=15.0)
    assert plan == plan_faults(faults, seed=3, stop_at=15.0)
    fixed = [(e.index, e.action, e.start, e.end, e.clipped) for e in plan if e.index != 6]
    assert fixed == [
        (2, "network", 1.0, 3.0, False),
        (0, "kill", 5.0, 5.0, False),
        (1, "pause", 8.0, 15.0, True),
    ]
    stochastic = [e for e in plan if e.index == 6]
    assert stochastic and all(e.action == "pause" and e.start < 15.0 for e in stochastic)
    assert [e.episode for e in stochastic] == list(range(len(stochastic)))
    assert plan[0].toxics and plan[0].toxics[0]["name"] == "latency_upstream_f2"


def test_supported_and_check_faults_name_what_cannot_run() -> None:
    alarm = fault(kind="memory_alarm", at=1, duration=1)
    assert supported(alarm, "rabbitmq") is None
    assert "not supported on activemq" in (supported(alarm, "activemq") or "")
    assert "external backend" in (
        supported(fault(kind="broker_kill", at=1), "rabbitmq", "external") or ""
    )
    assert (
        supported(fault(kind="latency", at=1, duration=1, latency=0.1), "rabbitmq", "external")
        is None
    )
    faults = [
        fault(kind="broker_pause", at=1, duration=1, target="broker7"),
        fault(kind="latency", at=1, duration=1, latency=0.1, side="consumers"),
        fault(kind="partition", at=1, duration=1, mode="refuse", toxicity=0.5),
        fault(kind="disk_alarm", at=1, duration=1),
    ]
    problems = check_faults(
        faults,
        broker_kind="activemq",
        node_names={"broker": "activemq0"},
        links={"producers": ["p"]},
    )
    text = "\n".join(problems)
    assert "faults[0] (broker_pause): target 'broker7' is not a broker node" in text
    assert "faults[1] (latency): no proxy link for side 'consumers'" in text
    assert "faults[2] (partition): partition mode 'refuse'" in text
    assert "faults[3] (disk_alarm): disk_alarm: not supported on activemq" in text
    assert links_for("all", {"producers": ["p"], "consumers": ["c", "p"]}) == ["p", "c"]
    assert needs_proxy(faults) and not needs_proxy([faults[0], faults[3]])
    assert check_faults(faults[1:2], broker_kind="rabbitmq", links=None) == [
        "faults[0] (latency): network faults need the fault proxy (no links given)"
    ]


def test_broker_faults_are_one_rule_for_the_plan_the_checks_and_the_injector() -> None:
    from typing import get_args

    from testbed.core.faultplan import BROKER_FAULT_KINDS, is_broker_fault
    from testbed.core.scenario_faults import BrokerFault

    assert get_args(BrokerFault.model_fields["kind"].annotation) == BROKER_FAULT_KINDS
    assert BROKER_FAULT_KINDS == (
        "broker_kill", "broker_pause", "broker_restart", "memory_alarm", "disk_alarm"
    )  # fmt: skip
    assert all(is_broker_fault(k, "anything") for k in BROKER_FAULT_KINDS)
    assert is_broker_fault("stochastic", "broker") and is_broker_fault("stochastic", "broker12")
    assert not is_broker_fault("stochastic", "workers") and not is_broker_fault("latency", "broker")
    assert is_broker_fault("stochastic", "east", {"east": "rabbit@east"})
    stochastic = fault(kind="stochastic", target="broker1", mttf=10, mttr=1)
    assert "external backend" in (supported(stochastic, "rabbitmq", "external") or "")
    on_workers = fault(kind="stochastic", target="workers", mttf=10, mttr=1)
    assert supported(on_workers, "rabbitmq", "external") is None
