"""Live runs through the real pipeline (Locust + real brokers): rates, ledger, visibility
timeout, dead-lettering, message-driven chains, distributed workers.

Runs reuse the session brokers (the run finds them in the backend's home). Durations are short
so the file stays within a few minutes; tolerances come from the Poisson noise of the counts.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.brokers import make_adapter
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import load_scenario
from testbed.core.scenario_units import RESOLVED_HEADER
from testbed.observe.process_cpu import read_usage
from testbed.observe.stats import make_stats_poller
from testbed.run import run_scenario
from tests.integration.live import run_quietly

pytestmark = pytest.mark.integration

BROKERS = ["rabbitmq", "activemq"]


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> BrokerEndpoint:
    """The session broker named by the test's `kind` parameter."""
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def live(tmp_path: Path, home: Path, text: str, **kwargs: object) -> Path:
    return run_quietly(text, tmp_path, home, name="scenario.yaml", **kwargs)


def tables(run_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, int]]:
    m = pq.read_table(run_dir / "measured" / "messages.parquet").to_pandas()
    d = pq.read_table(run_dir / "measured" / "deliveries.parquet").to_pandas()
    e = pq.read_table(run_dir / "measured" / "events.parquet").to_pandas()
    ledger = json.loads((run_dir / "measured" / "ledger.json").read_text())
    return m, d, e, ledger


def explain_lost(run_dir: Path, broker: BrokerEndpoint) -> str:
    """Where the confirmed-but-never-acked messages of a run went, for an assertion message:
    their records, the run's events and every destination's depth on the broker now."""
    m, d, e, _ = tables(run_dir)
    lost = m[m.t_confirm.notna() & ~m.msg_id.isin(d[d.outcome == "acked"].msg_id)]
    poller = make_stats_poller(broker)
    try:
        poll = poller.poll()
    finally:
        poller.close()
    depths = {q: (s.ready, s.unacked, s.consumers) for q, s in poll.queues.items()}
    return "\n".join(
        [
            f"lost (confirmed, never acked): {lost.to_dict('records')[:5]}",
            f"their deliveries: {d[d.msg_id.isin(lost.msg_id)].to_dict('records')}",
            f"events: {e[['t', 'kind', 'target', 'detail']].to_dict('records')}",
            f"broker now (ready, unacked, consumers) per destination: {depths}",
        ]
    )


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_poisson_rate_latency_and_exact_ledger(
    tmp_path: Path, local_backend: LocalBackend, broker: BrokerEndpoint
) -> None:
    """Two Poisson producers at 100/s for 8 s, 10 % of deliveries dropped without ack and
    handed back at once: rate within noise, every message delivered once, lost = 0."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        f"""
name: ledger-{broker.kind}
duration: 8s
warmup: 1s
drain_timeout: 20s
broker: {{kind: {broker.kind}}}
topology:
  queues: [{{name: work}}]
producers:
  - {{name: p, count: 2, queue: work, arrival: {{kind: poisson, rate: 100/s}}, size: 1KB, confirms: true}}
consumers:
  - {{name: c, queue: work, count: 2, prefetch: 10, service_time: {{kind: exponential, mean: 2ms}},
     failure_probability: 0.1}}
""",
    )
    m, d, e, ledger = tables(run_dir)
    load = m[(m.t_intended >= 1.0) & (m.t_intended < 8.0)]
    expected = 200 * 7.0
    assert abs(len(load) - expected) < 4 * math.sqrt(expected), len(load)
    assert (m.t_confirm >= m.t_publish).all()
    delay = m.t_publish - m.t_intended
    assert (delay >= 0).all() and delay.median() < 0.005
    nacked = int((d.outcome == "nacked").sum())
    assert ledger["sent"] == ledger["confirmed"] == ledger["delivered_unique"] == len(m)
    assert ledger["lost"] == ledger["duplicated"] == ledger["unexpected"] == 0
    assert nacked > 0 and ledger["redeliveries"] == nacked
    assert abs(nacked / len(d) - 0.1) < 0.03
    acked = d[d.outcome == "acked"]
    # the median delivery stays within a small multiple of the shipped profile's measured
    # path at this load plus two service times: a 40 ms Nagle stall would fail it
    path = default_profile(broker.kind).client_path
    assert path is not None
    bound = 3 * path.delivery_table(200.0, 1024, False, 0.0).quantile(0.5) + 2 * 0.002
    assert acked.latency_s.between(0, 5).all() and acked.latency_s.median() < bound, bound
    # each served delivery records the service time it drew: exponential, mean 2 ms; the
    # client's own cost t_done - t_deliver - service_s is positive and small
    assert acked.service_s.notna().all() and d[d.outcome == "nacked"].service_s.isna().all()
    n = len(acked)
    assert abs(acked.service_s.mean() - 0.002) < 4 * 0.002 / math.sqrt(n), acked.service_s.mean()
    own = acked.t_done - acked.t_deliver - acked.service_s
    assert (own > -1e-4).all() and own.median() < 0.01, own.describe()
    phases = [json.loads(x)["phase"] for x in e[e.kind == "phase"].detail]
    assert phases == ["warmup", "load", "drain", "end"]
    locust = run_dir / "measured" / "locust"
    assert (locust / "r0_stats.csv").stat().st_size > 0 and (locust / "r0.html").exists()
    stats = pd.read_csv(locust / "r0_stats.csv")
    assert set(stats["Type"].dropna()) >= {"publish", "consume"}
    env = json.loads((run_dir / "environment.json").read_text())
    assert env["interrupted"] is False and env["broker"]["kind"] == broker.kind
    copy = (run_dir / "scenario.yaml").read_text()  # resolved: base units, read back as is
    assert copy.startswith(RESOLVED_HEADER) and "\nname: ledger-" in copy
    assert load_scenario(run_dir / "scenario.yaml").consumers[0].service_time.mean == 0.002


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_visibility_timeout_redelivers_after_vt_and_dead_letters(
    tmp_path: Path, local_backend: LocalBackend, broker: BrokerEndpoint
) -> None:
    """VT = 400 ms, failure probability 0.5, max 2 deliveries: failed attempts reappear after
    VT (±100 ms at the median), exhausted messages land in the dead-letter queue."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        f"""
name: vt-{broker.kind}
duration: 5s
drain_timeout: 20s
broker: {{kind: {broker.kind}}}
topology:
  queues:
    - {{name: jobs, visibility: {{timeout: 400ms, max_deliveries: 2}}}}
producers:
  - {{name: p, queue: jobs, arrival: {{kind: constant, rate: 40/s}}, confirms: true}}
consumers:
  - {{name: c, queue: jobs, count: 2, prefetch: 5, service_time: 1ms, failure_probability: 0.5}}
""",
    )
    m, d, e, ledger = tables(run_dir)
    d = d.sort_values(["msg_id", "attempt"])
    first = d[d.attempt == 1].set_index("msg_id")
    second = d[d.attempt == 2].set_index("msg_id")
    gaps = (second.t_deliver - first.loc[second.index].t_deliver).dropna()
    assert len(gaps) > 20
    assert abs(gaps.median() - 0.4) < 0.1, gaps.describe()
    assert (gaps >= 0.4).all()
    assert set(first.loc[second.index].outcome) == {"timed_out"}
    assert (second.redelivered).all()
    vt_events = e[e.kind == "visibility_timeout"]
    assert len(vt_events) == int(d.outcome.isin(["timed_out", "dead_lettered"]).sum())
    dead = d[d.outcome == "dead_lettered"]
    assert len(dead) > 0 and set(dead.attempt) == {2}
    assert ledger["dead_lettered"] == dead.msg_id.nunique()
    assert ledger["lost"] == 0
    assert ledger["delivered_unique"] + ledger["dead_lettered"] == ledger["sent"]
    # the dead-letter queue really holds them
    adapter = make_adapter(broker)
    adapter.connect()
    try:
        consumer = adapter.consumer("jobs.dlq", prefetch=100, ack_mode="auto")
        got: set[str] = set()
        # up to 20 s, ending as soon as every dead letter is back: on a loaded machine ActiveMQ
        # once handed over only 34 of the 48 its DLQ held (the run's sampler saw 48) within 6 s
        for _ in range(100):
            batch = consumer.drain(0.2)
            got |= {x.msg_id for x in batch}
            if not batch and len(got) >= len(dead):
                break
        consumer.close()
    finally:
        adapter.close()
    assert got == set(dead.msg_id)


def test_message_driven_chain_latency_per_type(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    """The SPECjms2007 interaction-1 chain (sped up): every link's message type is delivered
    once per interaction, and per-type latencies come out of the records."""
    text = (
        Path(__file__).resolve().parents[2]
        / "workloads"
        / "scenarios"
        / "specjms2007-interaction1.yaml"
    ).read_text()
    text = (
        text.replace("rate: 1.54/s", "rate: 20/s")
        .replace("duration: 120s", "duration: 6s")
        .replace("warmup: 10s", "warmup: 1s")
    )
    run_dir = live(tmp_path, local_backend.home, text)
    m, d, _, ledger = tables(run_dir)
    per_type = d.merge(m[["msg_id", "flow"]], on="msg_id", how="inner").groupby("flow")
    counts = per_type.msg_id.nunique()
    orders = counts["Order"]
    assert orders > 60
    for t in ("OrderConf", "ShipDep", "StatInfo", "ShipInfo", "ShipConf"):
        assert counts[t] == orders, (t, counts.to_dict())
    medians = per_type.latency_s.median()
    assert (medians > 0).all() and (medians < 0.5).all(), medians
    assert ledger["lost"] == 0 and ledger["sent"] == 6 * orders


def test_distributed_workers(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    """`workers: 2`: a Locust master and two worker processes share the users."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        """
name: distributed
duration: 5s
topology: {queues: [{name: dq}]}
producers:
  - {name: p, count: 2, queue: dq, arrival: {kind: poisson, rate: 50/s}, confirms: true}
consumers:
  - {name: c, queue: dq, count: 2}
""",
        workers=2,
    )
    m, d, _, ledger = tables(run_dir)
    assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"] > 300
    # instances are named <group>.<worker>.<i>; Locust spreads the four users over both workers
    producer_workers = set(m.msg_id.str.split(".").str[3])  # <token>.r0.<group>.<worker>.<i>.<n>
    consumer_workers = set(d.consumer.str.split(".").str[1])
    assert producer_workers | consumer_workers == {"1", "2"}
    logs = sorted(p.name for p in (run_dir / "measured" / "locust").glob("*.log"))
    assert logs == ["r0-master.log", "r0-worker1.log", "r0-worker2.log"]
    # each worker process wrote its CPU time and its own counts (the master runs no users)
    usage = read_usage(run_dir)
    assert sorted(u.worker.split("-")[0] for u in usage) == ["w1", "w2"], usage
    assert sum(u.publishes for u in usage) == len(m)
    assert sum(u.deliveries for u in usage) == len(d)
    assert all(0 < u.cpu_s < u.wall_s < 60 for u in usage), usage
    for u in usage:  # a sample a second of the running totals, ending at most at the totals
        assert len(u.samples) >= 3 and u.samples[-1][2] <= u.publishes, u.samples
        assert all(a[1] <= b[1] for a, b in zip(u.samples, u.samples[1:], strict=False))
    env = json.loads((run_dir / "environment.json").read_text(encoding="utf-8"))
    assert sorted(g["worker"] for g in env["load_generators"]) == sorted(u.worker for u in usage)


def test_t0_waits_for_every_process_with_users_and_no_more(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    """Three workers for two users: t=0 is fixed once the two processes that got a user are
    ready (the third never will be), the load starts at t=0 rather than late, and the ready
    markers are gone from the run directory."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        """
name: fewer-users
duration: 2s
topology: {queues: [{name: fq}]}
producers:
  - {name: p, queue: fq, arrival: {kind: constant, rate: 50/s}, confirms: true}
consumers:
  - {name: c, queue: fq}
""",
        workers=3,
    )
    m, d, _, ledger = tables(run_dir)
    assert ledger["lost"] == 0 and ledger["sent"] == ledger["delivered_unique"] >= 95
    # the constant schedule's first send is due at t=0: ready users send it on time
    assert 0 <= m.t_publish.min() < 0.1, m.t_publish.min()
    assert not list(run_dir.glob("*.ready*"))
    config = json.loads((run_dir / "worker-config.r0.json").read_text())
    assert config["t0_ns"] > 0


@pytest.mark.parametrize("broker", BROKERS, indirect=True)
def test_client_crashes_redeliver_and_restart(
    tmp_path: Path, local_backend: LocalBackend, broker: BrokerEndpoint
) -> None:
    """A consumer crashes at 3 s holding prefetched messages and comes back 2 s later; a
    producer crashes at 4 s for 1 s. Nothing confirmed is lost, the crashed consumer's unacked
    messages are redelivered, the producer's schedule has a one-second hole. The consumers are
    overloaded (2 × 40/s for 100/s offered) so the crashed one surely holds a full prefetch:
    with idle consumers whether it holds anything is a race with the schedule."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        f"""
name: crashes-{broker.kind}
duration: 8s
drain_timeout: 30s
overload: true
broker: {{kind: {broker.kind}}}
topology: {{queues: [{{name: cq}}]}}
producers:
  - {{name: p, queue: cq, arrival: {{kind: constant, rate: 100/s}}, confirms: true}}
consumers:
  - {{name: c, queue: cq, count: 2, prefetch: 20, service_time: 25ms}}
faults:
  - {{kind: consumer_crash, at: 3s, target: c, count: 1, restart_after: 2s}}
  - {{kind: producer_crash, at: 4s, target: p, restart_after: 1s}}
""",
    )
    m, d, e, ledger = tables(run_dir)
    starts = e[e.kind == "fault_start"]
    ends = e[e.kind == "fault_end"]
    assert sorted(json.loads(x)["kind"] for x in starts.detail) == [
        "consumer_crash",
        "producer_crash",
    ]
    assert len(ends) == 2
    crash_t = starts[starts.detail.str.contains("consumer_crash")].t.iloc[0]
    assert abs(crash_t - 3.0) < 0.1
    assert abs(ends[ends.detail.str.contains("consumer_crash")].t.iloc[0] - crash_t - 2.0) < 0.2
    # the crashed consumer held its 20 prefetched, unacked messages: they come back redelivered
    after = d[(d.t_deliver > crash_t) & d.redelivered]
    assert 15 <= len(after) <= 22, len(after)
    assert ledger["lost"] == 0, explain_lost(run_dir, broker)  # seen once (=1, ActiveMQ) in CI
    # an ack written just before the crash can die with the connection: the broker redelivers
    # a message that was processed (at-least-once) — at most the crashed consumer's last acks
    assert ledger["duplicated"] <= 2
    # publishes in flight at the producer crash stay unconfirmed; delivered ones are "recovered"
    assert ledger["delivered_unique"] == ledger["confirmed"] + ledger["recovered"]
    gaps = m.dropna(subset=["t_publish"]).sort_values("t_publish").t_publish.diff()
    assert gaps.max() > 0.9  # the producer was down for one second
    # 8 s at 100/s: the ~100 sends due while the producer was down are counted (no publish time)
    assert 740 < ledger["sent"] < 860
    missed = m[m.t_publish.isna()]
    assert 40 < len(missed) < 200 and missed.t_confirm.isna().all()


def test_replications_use_derived_seeds_and_separate_ledgers(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    """`--replications 2`: two load phases with seeds derived from the scenario seed — the
    schedules differ, every table carries its replication, one ledger each plus their sum."""
    run_dir = live(
        tmp_path,
        local_backend.home,
        """
name: reps
seed: 7
duration: 3s
topology: {queues: [{name: rq}]}
producers: [{name: p, queue: rq, arrival: {kind: poisson, rate: 100/s}, confirms: true}]
consumers: [{name: c, queue: rq}]
""",
        replications=2,
    )
    m, d, _, total = tables(run_dir)
    assert sorted(m.replication.unique()) == [0, 1] and sorted(d.replication.unique()) == [0, 1]
    firsts = [m[m.replication == r].sort_values("t_intended").t_intended.head(20).to_list()
              for r in (0, 1)]  # fmt: skip
    assert firsts[0] != firsts[1]  # different derived seeds, different Poisson schedules
    reps = [json.loads((run_dir / "measured" / f"ledger.r{r}.json").read_text()) for r in (0, 1)]
    for r, led in enumerate(reps):
        assert led["sent"] == (m.replication == r).sum() > 150 and led["lost"] == 0
    assert total == {k: reps[0][k] + reps[1][k] for k in total}


def test_ui_serves_locust_web_ui_while_the_run_is_live(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    """`--ui`: Locust runs with its web UI on 127.0.0.1 (autostarted, not headless); its stats
    endpoint shows the scenario's users while the load runs, and the run ends by itself."""
    import io
    import re
    import threading
    import urllib.request

    out = io.StringIO()
    f = tmp_path / "scenario.yaml"
    f.write_text("""
name: ui
duration: 8s
topology: {queues: [{name: uq}]}
producers: [{name: p, count: 2, queue: uq, arrival: {kind: poisson, rate: 50/s}}]
consumers: [{name: c, queue: uq}]
""")
    result: dict[str, object] = {}

    def run() -> None:
        result["run"] = run_scenario(f, home=local_backend.home, out_dir=tmp_path / "runs",
                                     predict=False, ui=True,
                                     console=Console(file=out, width=200))  # fmt: skip

    t = threading.Thread(target=run, daemon=True)
    t.start()
    url, stats = None, None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and t.is_alive():
        found = re.search(r"Locust web UI: (http://127\.0\.0\.1:\d+)", out.getvalue())
        if found:
            url = found.group(1)
            try:
                with urllib.request.urlopen(url + "/stats/requests", timeout=2) as resp:
                    stats = json.loads(resp.read())
            except OSError:
                stats = None
            if stats and stats.get("state") == "running" and stats.get("user_count") == 3:
                break
        time.sleep(0.3)
    assert url is not None, out.getvalue()
    assert stats is not None and stats["state"] == "running" and stats["user_count"] == 3, stats
    t.join(timeout=90)
    assert not t.is_alive(), "the --ui run did not end by itself"
    run_dir = result["run"].run_dir  # type: ignore[attr-defined]
    _, _, _, ledger = tables(run_dir)
    assert ledger["sent"] > 300 and ledger["lost"] == 0
    assert (run_dir / "measured" / "locust" / "r0_stats.csv").stat().st_size > 0
