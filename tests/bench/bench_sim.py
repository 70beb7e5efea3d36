"""Simulator performance: messages per wall second, growth with size, peak memory.

    .venv/bin/python tests/bench/bench_sim.py            # ~5 min on a 2-vCPU machine
    .venv/bin/python tests/bench/bench_sim.py --quick    # skips the 1e6-message and 1 h runs

A plain script that prints figures (not a timed unit test). The scenario is quickstart-shaped
(two Poisson producers with publisher confirms → one queue → consumers with exponential
service, amqp model, the default RabbitMQ profile) with 4 consumers; rates are scaled up so
that short simulated durations carry many messages (ρ ≈ 0.6).

1. Throughput: simulated messages per wall second of ``env.run`` on one core (best of 3).
2. Growth: a whole single-replication ``predict()`` (simulate, build tables, write Parquet,
   summarise) at 1e4, 1e5, 1e6 messages in fresh processes; cost per message must stay flat.
3. Peak memory: the max RSS of those processes (``resource.getrusage``), the 1e6 one being
   the figure asked for.
4. Memory flat in the run's length (issue 18 §3): a prediction of the quickstart shape at
   1,000 msg/s (10 producers × 100/s, 10 consumers), 6 minutes vs 1 hour (3.6 M messages;
   ``--quick``: 12 s vs 1 min, the machinery only), each in a fresh process: peak RSS, and
   the ratio (target: 1 h < 512 MiB and within 1.2 × the 6-minute run).
5. Side by side with the peers (issue 18 §4, ``tests/bench/peers.py``): an M/M/2 station and
   an M/M/1 → M/M/1 tandem in bare SimPy, Ciw and mqbed's simulator — mean sojourn with its
   95 % interval (the three must overlap), simulated customers per wall second and the ratio
   to bare SimPy.

Besides that human output it prints each figure as a record of `mqbed bench`'s figure protocol
(``mqbed-figure {...}`` lines, testbed/bench/figures.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def emit(key: str, value: float | None, **kw: Any) -> None:
    """A figure record on stdout; imported here, not at the top: the fresh child processes
    measure their own peak memory and must not carry the suite's modules."""
    from testbed.bench.catalogue import emit as record

    record(key, value, **kw)


RATE_PER_PRODUCER = 2000.0  # 2 producers → 4,000 msg/s offered; 4 consumers × 1/0.6 ms

SCENARIO = """
name: bench-quickstart4
seed: 42
duration: {duration}s
warmup: 1s
drain_timeout: 30s
broker: {{kind: rabbitmq}}
topology:
  queues: [{{name: work, durable: true}}]
producers:
  - {{name: orders, count: 2, queue: work, arrival: {{kind: poisson, rate: {rate}/s}},
      size: 1KB, confirms: true}}
consumers:
  - {{name: workers, queue: work, count: 4, prefetch: 10, ack: after_processing,
      service_time: {{kind: exponential, mean: 0.6ms}}}}
"""


def scenario(messages: float):  # type: ignore[no-untyped-def]
    from testbed.core.scenario_loader import parse_scenario

    duration = max(messages / (2 * RATE_PER_PRODUCER), 2.0)
    s, issues = parse_scenario(SCENARIO.format(duration=duration, rate=RATE_PER_PRODUCER))
    assert s is not None, [str(i) for i in issues]
    return s


def throughput(messages: float) -> tuple[float, int]:
    """Best-of-3 simulated messages per wall second of the event loop alone."""
    from emulator.sim.model import Model
    from testbed.core.profile import default_profile

    best, count = 0.0, 0
    for rep in range(3):
        m = Model(scenario(messages), default_profile("rabbitmq"), rep)
        t0 = time.perf_counter()
        m.env.run(until=m.stop_event)
        wall = time.perf_counter() - t0
        count = m.rec.messages
        best = max(best, count / wall)
    return best, count


def child(messages: float) -> None:
    """One whole prediction in this (fresh) process; prints a JSON line of figures."""
    from emulator.predict import predict

    sim = {}

    def progress_result(line: str) -> None:
        sim["line"] = line

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = predict(
            scenario(messages), Path(tmp), replications=1, processes=1, progress=progress_result
        )
        wall = time.perf_counter() - t0
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "messages": res.messages,
                "wall_s": wall,
                "peak_rss_mib": rss_kib / 1024,
                "progress": sim.get("line", ""),
            }
        )
    )


HOUR = """
name: bench-hour
seed: 42
duration: {duration}s
warmup: 5s
drain_timeout: 30s
broker: {{kind: rabbitmq}}
topology:
  queues: [{{name: work, durable: true}}]
producers:
  - {{name: orders, count: 10, queue: work, arrival: {{kind: poisson, rate: 100/s}},
      size: 1KB, persistent: false, confirms: true}}
consumers:
  - {{name: workers, queue: work, count: 10, prefetch: 10, ack: after_processing,
      service_time: {{kind: exponential, mean: 5ms}}}}
"""


def child_hour(duration: float) -> None:
    """A quickstart-shaped prediction at 1,000 msg/s in this (fresh) process; a JSON line."""
    from emulator.predict import predict
    from testbed.core.scenario_loader import parse_scenario

    s, issues = parse_scenario(HOUR.format(duration=duration))
    assert s is not None, [str(i) for i in issues]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = predict(s, Path(tmp), replications=1, processes=1)
        wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"messages": res.messages, "wall_s": wall, "peak_rss_mib": rss}))


def _fresh(*args: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, cwd=ROOT
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def memory_flat(quick: bool) -> None:
    short, long = (12.0, 60.0) if quick else (360.0, 3600.0)
    a, b = _fresh("--child-hour", str(short)), _fresh("--child-hour", str(long))
    ratio = b["peak_rss_mib"] / a["peak_rss_mib"]
    ok = ratio <= 1.2 and b["peak_rss_mib"] < 512
    verdict = "not judged: --quick" if quick else ("pass" if ok else "FAIL")
    print("4. memory vs run length (quickstart shape, 1,000 msg/s, 10 consumers, fresh process):")
    for d, r in ((short, a), (long, b)):
        print(
            f"   {d / 60:>5.1f} min {r['messages']:>10,} messages {r['wall_s']:>7.1f} s wall "
            f"{r['peak_rss_mib']:>6.0f} MiB peak RSS"
        )
    print(
        f"   peak RSS {long / 60:.0f} min / {short / 60:.1f} min: ×{ratio:.2f} "
        f"(target for 1 h vs 6 min: ≤ 1.2 and < 512 MiB; {verdict})"
    )
    note = "--quick: 1 min vs 12 s, not judged" if quick else None
    emit("simulator.hour_rss", b["peak_rss_mib"], note=note, judged=not quick)
    emit(
        "simulator.hour_vs_6min",
        b["peak_rss_mib"],
        anchor=a["peak_rss_mib"],
        note=note,
        judged=not quick,
    )


def peers(quick: bool) -> None:
    from tests.bench.peers import QueueModel, agree, compare

    horizon, reps = (30.0, 4) if quick else (300.0, 8)
    print(f"5. peers on the same model ({reps} replications of {horizon:.0f} s each):")
    print(
        f"   {'model':<26} {'engine':<6} {'mean sojourn ms [95% CI]':>32} {'msg/s':>9} {'÷ SimPy':>8}"
    )
    for key, m in (
        ("mm2", QueueModel("M/M/2 (λ=160, μ=100)", 160.0, (100.0,), 2)),
        ("tandem", QueueModel("M/M/1→M/M/1 (60; 100, 80)", 60.0, (100.0, 80.0))),
    ):
        res = compare(m, horizon, reps)
        base = res["simpy"]["msg_s"]
        for name, r in res.items():
            lo, hi = r["ci"]
            ci = f"{1e3 * r['mean']:.2f} [{1e3 * lo:.2f}, {1e3 * hi:.2f}]"
            print(
                f"   {m.name:<26} {name:<6} {ci:>32} {r['msg_s']:>9,.0f} {r['msg_s'] / base:>8.2f}"
            )
        print(f"   {'':<26} agree (95 % intervals overlap): {'yes' if agree(res) else 'NO'}")
        emit(f"simulator.speed_{key}", res["mqbed"]["msg_s"], anchor=base)
        emit(f"simulator.ciw_{key}", res["ciw"]["msg_s"], anchor=base)
        emit(
            f"simulator.agree_{key}",
            1e3 * res["mqbed"]["mean"],
            anchor=1e3 * res["simpy"]["mean"],
            ok=agree(res),
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the 1e6-message run")
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--child-hour", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    if args.child_hour:
        child_hour(args.child_hour)
        return

    rate, n = throughput(5e4 if args.quick else 2e5)  # --quick: the machinery, not the figure
    print(
        f"1. throughput (event loop, one core, {n:,} messages, best of 3): "
        f"{rate:,.0f} simulated msg/s   (target ≥ 50,000)"
    )
    emit("simulator.throughput", rate)

    sizes = [1e4, 1e5] if args.quick else [1e4, 1e5, 1e6]
    rows = []
    for size in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(size)],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("2. growth of a whole predict() (1 replication, fresh process each):")
    print(f"   {'messages':>10} {'wall s':>8} {'µs/msg':>8} {'peak RSS MiB':>13}")
    for r in rows:
        print(
            f"   {r['messages']:>10,} {r['wall_s']:>8.2f} {1e6 * r['wall_s'] / r['messages']:>8.1f}"
            f" {r['peak_rss_mib']:>13.0f}"
        )
    per = [r["wall_s"] / r["messages"] for r in rows]
    ratio = per[-1] / per[1]
    print(
        f"   cost per message, {rows[-1]['messages']:,} vs {rows[1]['messages']:,}: ×{ratio:.2f} "
        f"({'linear' if ratio < 1.3 else 'NOT linear'}; the 1e4 run is dominated by start-up)"
    )
    big = rows[-1]
    extra = (big["peak_rss_mib"] - rows[0]["peak_rss_mib"]) / (
        big["messages"] - rows[0]["messages"]
    )
    print(
        f"3. peak memory of a {big['messages']:,}-message prediction: "
        f"{big['peak_rss_mib']:.0f} MiB RSS (≈{extra * 2**20:.0f} bytes per message "
        f"above a {rows[0]['peak_rss_mib']:.0f} MiB base)"
    )
    if args.quick:
        emit("simulator.growth", None, note="--quick skips the 1e6-message run")
        emit("simulator.peak_rss_1e6", None, note="--quick skips the 1e6-message run")
    else:
        emit("simulator.growth", 1e6 * per[-1], anchor=1e6 * per[1])
        emit(
            "simulator.peak_rss_1e6",
            big["peak_rss_mib"],
            note=f"≈{extra * 2**20:.0f} B per message above the 1e4 run",
        )
    memory_flat(args.quick)
    peers(args.quick)


if __name__ == "__main__":
    main()
