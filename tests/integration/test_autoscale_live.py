"""Live autoscaling on real brokers (docs/models.md §8): a queue builds, target tracking adds
consumers (after their start-up delay), the backlog drains, consumers are removed gracefully,
and the ledger shows nothing lost and nothing processed twice because of the scale-down."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from tests.integration.live import run_quietly

pytestmark = pytest.mark.integration


def assert_steps_sent_exactly(
    measured: Path, steps: list[tuple[float, float]], duration: float, sent: int
) -> None:
    """A ``steps`` arrival with ``process: constant`` sends the k-th message at Λ⁻¹(k + phase)
    (phase in [0, 1)), every scheduled time in [0, duration) even when late: each step sends
    rate × span messages, give or take the one the phase moves across its edge, and the run
    rate × span summed over steps exactly when that sum is whole (as here). `steps`: (at, rate)."""
    ends = [at for at, _ in steps[1:]] + [duration]
    spans = [(at, end, rate * (end - at)) for (at, rate), end in zip(steps, ends, strict=True)]
    expected = sum(n for _, _, n in spans)
    assert expected == int(expected)  # the scenarios below are chosen so
    assert sent == expected, (sent, spans)
    intended = pq.read_table(measured / "messages.parquet").column("t_intended").to_pylist()
    assert len(intended) == sent and min(intended) >= 0 and max(intended) < duration
    for at, end, n in spans:
        got = sum(at <= t < end for t in intended)
        assert abs(got - n) <= 1, (at, end, got, n)


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> BrokerEndpoint:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


SCENARIO = """
name: autoscale-{kind}
duration: 20s
drain_timeout: 30s
broker: {{kind: {kind}}}
topology:
  queues: [{{name: scaled-jobs, durable: false}}]
producers:
  - name: p
    queue: scaled-jobs
    arrival: {{kind: steps, steps: [{{at: 0s, rate: 300/s}}, {{at: 6s, rate: 20/s}}],
               process: constant}}
    size: 200B
    confirms: true
consumers:
  - {{name: workers, queue: scaled-jobs, count: 1, prefetch: 5, service_time: 10ms}}
autoscaling:
  - policy: target_tracking
    target: workers
    target_value: 50
    min_replicas: 1
    max_replicas: 4
    interval: 1s
    startup_delay: 1s
    scale_down_stabilization: 3s
"""


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"], indirect=True)
def test_scale_up_drain_scale_down_loses_nothing(
    tmp_path: Path, local_backend: LocalBackend, broker: BrokerEndpoint
) -> None:
    run_dir = run_quietly(SCENARIO.format(kind=broker.kind), tmp_path, local_backend.home)
    measured = run_dir / "measured"
    events = pq.read_table(measured / "events.parquet").to_pylist()
    scale = [(e["t"], json.loads(e["detail"])) for e in events if e["kind"] == "scale"]
    ups = [(t, d) for t, d in scale if d["action"] == "up"]
    downs = [(t, d) for t, d in scale if d["action"] == "down"]
    # 300 msg/s against one consumer of 100 msg/s: the queue builds and consumers are added
    assert ups, [d for _, d in scale]
    t_up, up = ups[0]
    assert up["desired"] > up["current"] == 1
    assert up["metric"] == "queue_length" and up["value"] - 50 > 0.1 * 50  # beyond tolerance
    assert {"ready", "unacked", "publish_rate", "ack_rate", "target_value"} <= set(up)
    # how far the first decision scales depends on how long the queue had to build (a busy
    # machine samples it earlier or later), so every scale-up is checked, not only the first
    for t_i, d in ups:  # each new consumer waits its 1 s start-up delay
        for s in d["starts"]:
            assert s["ready_at"] == pytest.approx(t_i + 1.0, abs=1e-3), (t_i, d)
            assert s["source"] == "cold" or (downs and t_i > downs[0][0]), (t_i, d)
    starts = [e for e in events if e["kind"] == "consumer_start" and e["t"] > t_up]
    assert len(starts) == sum(d["desired"] - d["current"] for _, d in ups), (ups, starts)
    assert all(e["t"] >= t_up + 1.0 - 0.01 for e in starts)
    # after the burst the backlog drains and consumers are removed, gracefully
    assert downs and downs[0][0] > t_up
    stopped = [
        json.loads(e["detail"])
        for e in events
        if e["kind"] == "consumer_stop" and e["t"] >= downs[0][0]
    ]
    assert stopped and all(d["graceful"] for d in stopped)
    ts = pq.read_table(measured / "timeseries.parquet").to_pylist()
    jobs = [r for r in ts if r["queue"] == "scaled-jobs"]
    assert max(r["consumers"] for r in jobs) >= 3
    assert jobs[-1]["depth_ready"] + jobs[-1]["depth_unacked"] == 0
    ledger = json.loads((measured / "ledger.json").read_text())
    # 300/s for 6 s then 20/s to the end of the 20 s: 1800 + 280
    assert_steps_sent_exactly(measured, [(0.0, 300.0), (6.0, 20.0)], 20.0, ledger["sent"])
    assert ledger["lost"] == 0 and ledger["duplicated"] == 0
    assert ledger["delivered_unique"] == ledger["confirmed"] == ledger["sent"]


ELASTIC = """
name: elastic-{kind}
duration: 24s
drain_timeout: 30s
broker: {{kind: {kind}}}
topology:
  load_balanced: [{{alias: work, queues: 1, max_queues: 4, durable: false}}]
producers:
  - name: p
    queue: work
    arrival: {{kind: steps, steps: [{{at: 0s, rate: 250/s}}, {{at: 8s, rate: 20/s}}],
               process: constant}}
    size: 200B
    confirms: true
consumers:
  - {{name: workers, queue: work, count: 1, prefetch: 5, service_time: 10ms}}
autoscaling:
  - policy: elastic
    target: workers
    alias: work
    min_load: 20
    max_load: 100
    period: 1s
    max_replicas: 4
    startup_delay: 1s
    vm_capacity: 100/s
    preprovisioned: 1
    scale_down_step: 0.5
    scale_down_stabilization: 2s
"""


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"], indirect=True)
def test_elastic_queues_add_and_remove_members_losing_nothing(
    tmp_path: Path, local_backend: LocalBackend, broker: BrokerEndpoint
) -> None:
    run_dir = run_quietly(ELASTIC.format(kind=broker.kind), tmp_path, local_backend.home)
    measured = run_dir / "measured"
    events = pq.read_table(measured / "events.parquet").to_pylist()
    scale = [(e["t"], json.loads(e["detail"])) for e in events if e["kind"] == "scale"]
    ups = [d for _, d in scale if d["action"] == "up"]
    assert ups and ups[0]["avg_load"] > 100
    assert ups[0]["starts"][0]["source"] == "pool"  # the pre-provisioned host: no wait
    # scale-ups come at least two periods apart (a new member first gets a round of traffic),
    # longer than the 1 s boot of the pool's refill: no consumer ever waits for a boot
    starts = [(t, st["ready_at"]) for t, d in scale for st in d.get("starts", [])]
    assert all(ready == pytest.approx(t, abs=1e-5) for t, ready in starts), starts
    # the member added last is elected, its ratio lowered in steps of 0.5, removed once empty
    reasons = [d["reason"] for _, d in scale]
    assert "elect_scale_down" in reasons and "scale_down" in reasons
    removed = [d for _, d in scale if d["reason"] == "scale_down"]
    assert all(d["loads"][f"work.{d['stops'][0]}"] == 0 for d in removed)
    added = [st["slot"] for _, d in scale for st in d.get("starts", [])]
    assert removed[0]["stops"] == [added[-1]]
    # traffic reached the added members through the alias (a direct exchange, by ratio)
    deliveries = pq.read_table(measured / "deliveries.parquet").to_pylist()
    members = {r["queue"] for r in deliveries}
    assert {"work.0", "work.1"} <= members <= {f"work.{i}" for i in range(4)}
    stopped = [json.loads(e["detail"]) for e in events if e["kind"] == "consumer_stop"]
    assert stopped and all(d["graceful"] for d in stopped)
    ledger = json.loads((measured / "ledger.json").read_text())
    # 250/s for 8 s then 20/s to the end of the 24 s: 2000 + 320
    assert_steps_sent_exactly(measured, [(0.0, 250.0), (8.0, 20.0)], 24.0, ledger["sent"])
    assert ledger["lost"] == 0 and ledger["duplicated"] == 0
    assert ledger["delivered_unique"] == ledger["confirmed"] == ledger["sent"]
