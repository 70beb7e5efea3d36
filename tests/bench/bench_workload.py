"""Live-workload benchmark: prints measured figures (never asserts a speed).

    python tests/bench/bench_workload.py [--quick] [--rate MSG_S] [--home DIR] [--json FILE]

1. Rate fidelity: one Poisson producer at 5,000 msg/s (``--rate``) through `mqbed run`
   (Locust, recording on): achieved rate in the load window against the target and against
   the schedule, and the publish delay (t_publish - t_intended) p50/p99/p99.9/max. Targets
   (issue 18): within 1 % of the schedule, p99 < 5 ms, p99.9 < 20 ms.
2. Generator efficiency: msg/s one Locust worker process publishes (transient, no confirms,
   200 B, recording on) against a bare client loop on the same broker in the same run — pika
   `basic_publish` and kombu `Producer.publish` for RabbitMQ, stomp.py `send` for ActiveMQ.
   Target ratio >= 0.8 (issue 18).
3. Recording overhead: RSS growth while appending one million delivery rows through the
   batched writer, and bytes per row on disk.
4. Broker start-up: launch -> healthy of a fresh local RabbitMQ and ActiveMQ (own home each;
   with ``--quick``, the start of the benchmark's own two brokers instead).
5. ActiveMQ warm-up (`testbed.backends.warm_up`), run first: on a fresh ActiveMQ started cold
   (the benchmark's own, unless ``--home`` gives running ones), the median publish -> receive
   latency of a light stream (stomp.py, 100 msg/s), then the warm-up's own time, then the same
   stream again: what the warm-up is for, measured.

Besides that human output (a JSON dump at the end) it prints each figure as a record of
`mqbed bench`'s figure protocol (``mqbed-figure {...}`` lines, testbed/bench/figures.py).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import stomp
from rich.console import Console

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from testbed.backends.base import BrokerEndpoint  # noqa: E402
from testbed.backends.local import LocalBackend  # noqa: E402
from testbed.backends.warm_up import warm_up  # noqa: E402
from testbed.bench.catalogue import emit, emit_broker  # noqa: E402
from testbed.core.records import RecordWriter, merge_parts  # noqa: E402
from testbed.observe.process_cpu import read_usage  # noqa: E402
from testbed.run import run_scenario  # noqa: E402

_T0 = time.monotonic()
BROKER_MEMORY_MB = 1024
"""ActiveMQ's memory limit (RabbitMQ's watermark) for the benchmark's own brokers: the generator
loops write ~10^5 messages with no consumer, and at the default 256 MB ActiveMQ's producer flow
control stopped them — it measured the broker's memory limit, not the generator."""


def _step(what: str) -> None:
    """A progress line on stderr: a stuck benchmark's output says which step it was in."""
    print(f"[{time.monotonic() - _T0:6.1f} s] {what}", file=sys.stderr, flush=True)


def _rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _run(home: Path, out: Path, text: str) -> Path:
    f = out / "scenario.yaml"
    f.write_text(textwrap.dedent(text))
    return run_scenario(
        f, home=home, out_dir=out / "runs", predict=False, console=Console(stderr=True, quiet=True)
    ).run_dir


def rate_fidelity(home: Path, out: Path, seconds: int, rate: float) -> dict[str, Any]:
    run_dir = _run(
        home,
        out,
        f"""
        name: bench-rate
        duration: {seconds + 2}s
        warmup: 2s
        drain_timeout: 20s
        topology: {{queues: [{{name: rate}}]}}
        producers: [{{name: p, queue: rate, arrival: {{kind: poisson, rate: {rate:g}/s}}, size: 200B}}]
        consumers: [{{name: c, queue: rate, count: 1, prefetch: 200, ack: auto}}]
        """,
    )
    m = pq.read_table(run_dir / "measured" / "messages.parquet").to_pandas()
    load = m[(m.t_intended >= 2.0) & (m.t_intended < seconds + 2.0)]
    sent_in_window = int(((m.t_publish >= 2.0) & (m.t_publish < seconds + 2.0)).sum())
    delay_ms = (load.t_publish - load.t_intended) * 1e3
    return {
        "target_msg_s": rate,
        "achieved_msg_s": sent_in_window / seconds,
        "scheduled_msg_s": len(load) / seconds,
        "achieved_vs_target_pct": 100.0 * (sent_in_window / seconds / rate - 1.0),
        "achieved_vs_schedule_pct": 100.0 * (sent_in_window / max(1, len(load)) - 1.0),
        "publish_delay_ms": {
            q: float(np.percentile(delay_ms, p))
            for q, p in (("p50", 50), ("p99", 99), ("p999", 99.9))
        }
        | {"max": float(delay_ms.max())},
        "run_dir": run_dir.name,  # a temporary directory, gone after the benchmark
    }


def bare_pika(home: Path, seconds: float) -> float:
    import pika

    (ep,) = [e for e in LocalBackend(home).endpoints() if e.kind == "rabbitmq"]
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            ep.host, ep.port, credentials=pika.PlainCredentials(ep.username, ep.password)
        )
    )
    ch = conn.channel()
    ch.queue_declare("bench-bare", arguments={"x-max-length": 10000})
    body = b"m" * 200
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            ch.basic_publish("", "bench-bare", body)
        n += 100
    rate = n / seconds
    ch.queue_delete("bench-bare")
    conn.close()
    return rate


def bare_kombu(home: Path, seconds: float) -> float:
    """The pika loop's twin in kombu: one `Producer.publish` per message, no retry wrapper."""
    import kombu

    (ep,) = [e for e in LocalBackend(home).endpoints() if e.kind == "rabbitmq"]
    with kombu.Connection(
        hostname=ep.host, port=ep.port, userid=ep.username, password=ep.password
    ) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="bench-bare", auto_delete=False, arguments={"x-max-length": 10000})
        producer = kombu.Producer(ch, auto_declare=False)
        body = b"m" * 200
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(100):
                producer.publish(
                    body,
                    routing_key="bench-bare",
                    delivery_mode=1,
                    retry=False,
                    content_type="application/octet-stream",
                    content_encoding="binary",
                )
            n += 100
        ch.queue_delete(queue="bench-bare")
    return n / seconds


def bare_stomp(home: Path, seconds: float) -> float:
    import stomp

    (ep,) = [e for e in LocalBackend(home).endpoints() if e.kind == "activemq"]
    conn = stomp.Connection12([(ep.host, ep.port)], heartbeats=(0, 0))
    conn.connect(ep.username, ep.password, wait=True)
    body = b"m" * 200
    dest = "/queue/bench-bare"
    sent = [0]

    def loop() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(100):
                conn.send(dest, body, headers={"persistent": "false"})
            sent[0] += 100

    # stomp.py's send blocks for as long as ActiveMQ's producer flow control holds it (memory
    # limit full, no consumer): never wait on it unbounded
    sender = threading.Thread(target=loop, daemon=True)
    sender.start()
    sender.join(seconds + 30)
    if sender.is_alive():
        sys.exit(
            f"bare stomp.py loop blocked after {sent[0]} messages: ActiveMQ's producer flow "
            f"control (memory limit {BROKER_MEMORY_MB} MB full)"
        )
    conn.disconnect()
    return sent[0] / seconds


BARE = {"pika": bare_pika, "kombu": bare_kombu, "stomp": bare_stomp}


def generator(home: Path, out: Path, seconds: int, client: str = "pika") -> dict[str, Any]:
    # No consumer on either side (a consumer in the Locust process would take the producer's
    # CPU). ActiveMQ has no max-length: both loops write a fresh queue for a few seconds, below
    # the broker's memory limit — past it producer flow control slows sendall() 2-4x.
    kind = "activemq" if client == "stomp" else "rabbitmq"
    limit = ", max_length: 10000" if kind == "rabbitmq" else ""
    run_dir = _run(
        home,
        out,
        f"""
        name: bench-generator-{client}
        broker: {{kind: {kind}, client: {client}}}
        duration: {seconds + 1}s
        warmup: 1s
        drain_timeout: 0s
        overload: true
        topology: {{queues: [{{name: gen, durable: false{limit}}}]}}
        producers: [{{name: p, queue: gen, arrival: {{kind: constant, rate: 1000000/s}}, size: 200B}}]
        """,
    )
    m = pq.read_table(run_dir / "measured" / "messages.parquet").to_pandas()
    window = m[(m.t_publish >= 1.0) & (m.t_publish < seconds + 1.0)]
    locust_rate = len(window) / seconds
    # the worker's whole CPU over its life per publish: what the rate costs it, which a broker
    # that pushes back (ActiveMQ's flow control) does not blur as it blurs the rate
    (usage,) = read_usage(run_dir / "measured")
    bare = BARE[client](home, seconds)
    return {
        "locust_worker_msg_s": locust_rate,
        "locust_cpu_us_per_publish": usage.cpu_s / max(usage.publishes, 1) * 1e6,
        f"bare_{client}_msg_s": bare,
        "ratio": locust_rate / bare,
        "target_ratio": 0.8,
    }


def startup(out: Path) -> dict[str, float]:
    """Seconds from launch to healthy of a fresh broker of each kind (own home, then down)."""
    times: dict[str, float] = {}
    for kind in ("rabbitmq", "activemq"):
        backend = LocalBackend(out / f"startup-{kind}")
        t0 = time.monotonic()
        backend.up([kind], detach=False, warm=False)  # type: ignore[list-item]
        times[f"{kind}_s"] = round(time.monotonic() - t0, 2)
        backend.down()
    return times


def own_startup(backend: LocalBackend) -> dict[str, float]:
    """The launch -> healthy seconds of `backend`'s first node of each kind."""
    return {f"{kind}_s": backend.startup_seconds[f"{kind}0"] for kind in ("rabbitmq", "activemq")}


def light_stream(ep: BrokerEndpoint, seconds: float, rate: float = 100.0) -> float:
    """Median publish -> receive latency (ms) of transient 200 B messages sent at `rate` msg/s
    for `seconds` through one STOMP connection and queue (auto ack)."""
    got: list[float] = []
    connected = threading.Event()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_connected(self, frame: stomp.utils.Frame) -> None:
            connected.set()

        def on_message(self, frame: stomp.utils.Frame) -> None:
            got.append((time.time_ns() - int(frame.headers["sent-ns"])) / 1e6)

    conn = stomp.Connection12([(ep.host, ep.port)], heartbeats=(0, 0), timeout=5)
    conn.set_listener("bench", Listener())
    conn.connect(ep.username, ep.password, wait=False)  # wait=True waits without a limit
    if not connected.wait(10):
        conn.transport.disconnect_socket()
        raise RuntimeError(f"light stream: no CONNECTED frame from {ep.name} within 10 s")
    conn.subscribe("/queue/bench-light", id="light", ack="auto")
    n = int(seconds * rate)
    t0 = time.monotonic()
    for i in range(n):
        time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        conn.send("/queue/bench-light", b"x" * 200, headers={"sent-ns": str(time.time_ns())})
    deadline = time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    conn.disconnect()
    return float(np.median(got))


def activemq_warm_up(out: Path, seconds: float, cold: BrokerEndpoint | None) -> dict[str, float]:
    """A light stream on a cold fresh ActiveMQ, the warm-up, the same stream again: on `cold`
    (the benchmark's own broker, started without its warm-up) or on one started for this."""
    backend = None
    if cold is None:
        backend = LocalBackend(out / "warm-up")
        (cold,) = backend.up(["activemq"], detach=False, warm=False)
    try:
        before = light_stream(cold, seconds)
        done = warm_up(cold)
        after = light_stream(cold, seconds)
    finally:
        if backend is not None:
            backend.down()
    return {"cold_p50_ms": before, "warm_up_s": done.seconds, "messages": done.received,
            "warm_p50_ms": after}  # fmt: skip


def recording(out: Path, rows: int = 1_000_000) -> dict[str, Any]:
    before = _rss_bytes()
    peak = before
    w = RecordWriter(out / "rec", "deliveries", "bench", batch_rows=5000)
    t0 = time.perf_counter()
    for i in range(rows):
        w.append((f"tok.r0.p.0.0.{i}", "q", "c.0.0", 1, float(i), float(i) + 0.001, "acked",
                  False, 0.0012, 0.001, 0))  # fmt: skip
        if i % 50_000 == 0:
            peak = max(peak, _rss_bytes())
    w.close()
    append_s = time.perf_counter() - t0
    path = merge_parts(out / "rec", "deliveries")
    size = path.stat().st_size
    return {
        "rows": rows,
        "append_us_per_row": 1e6 * append_s / rows,
        "rss_growth_mb_while_running": (peak - before) / 1e6,
        "disk_bytes_per_row": size / rows,
        "disk_mb_per_million": size / rows * 1e6 / 1e6,
        "parquet_rows": pq.read_metadata(path).num_rows,
    }


def figures(step: str, r: dict[str, Any]) -> None:
    """Print the records of one finished step (a later step that fails keeps these)."""
    if step == "rate_fidelity":
        judged = r["target_msg_s"] == 5000  # the targets hold at 5,000 msg/s
        note = None if judged else f"at {r['target_msg_s']:,.0f} msg/s: not judged"
        delay = r["publish_delay_ms"]
        emit(
            "workload.rate_vs_schedule",
            r["achieved_msg_s"],
            anchor=r["scheduled_msg_s"],
            note=note,
            judged=judged,
        )
        emit("workload.publish_delay_p99", delay["p99"], note=note, judged=judged)
        emit("workload.publish_delay_p999", delay["p999"], note=note, judged=judged)
    elif step.startswith("generator_"):
        client = step.removeprefix("generator_")
        emit(f"workload.{step}", r["locust_worker_msg_s"], anchor=r[f"bare_{client}_msg_s"])
        emit(f"workload.generator_cpu_{client}", r["locust_cpu_us_per_publish"])
    elif step == "recording":
        emit("workload.record_append", r["append_us_per_row"])
        emit("workload.record_rss", r["rss_growth_mb_while_running"], note=f"{r['rows']:,} rows")
        emit("workload.record_disk", r["disk_bytes_per_row"])
    elif step == "broker_startup":
        for kind in ("rabbitmq", "activemq"):
            emit(f"workload.startup_{kind}", r[f"{kind}_s"])
    elif step == "activemq_warm_up":
        emit("workload.warm_up_activemq", r["warm_up_s"], note=f"{r['messages']:,} messages")
        emit("workload.cold_light_p50_activemq", r["cold_p50_ms"])
        emit("workload.warm_light_p50_activemq", r["warm_p50_ms"], anchor=r["cold_p50_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (CI): machinery, not numbers")
    ap.add_argument(
        "--home", type=Path, help="testbed home with a running RabbitMQ (else one is started)"
    )
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--rate", type=float, default=5000.0, help="rate fidelity: msg/s offered")
    args = ap.parse_args()
    # 60 s: at 5,000 msg/s the publish delay's p99.9 rests on 300 messages
    seconds = 3 if args.quick else 60
    with tempfile.TemporaryDirectory(prefix="mqbed-bench-") as tmp:
        out = Path(tmp)
        backend = LocalBackend(args.home or out / "home")
        started = args.home is None
        if started:
            _step("starting RabbitMQ and ActiveMQ")
            # ActiveMQ cold: the warm-up step below measures it, then warms it for the rest
            backend.up(["rabbitmq", "activemq"], detach=False, memory_limit_mb=BROKER_MEMORY_MB,
                       warm=False)  # fmt: skip
        elif {e.kind for e in backend.endpoints()} != {"rabbitmq", "activemq"}:
            sys.exit(f"--home {args.home}: needs a running RabbitMQ and ActiveMQ (mqbed up)")
        home = backend.home
        for ep in backend.endpoints():
            emit_broker(ep.kind, ep.version)
        own_amq = next(e for e in backend.endpoints() if e.kind == "activemq") if started else None
        gen_s = 3 if args.quick else 10
        steps = {
            "activemq_warm_up": lambda: activemq_warm_up(out, 3 if args.quick else 20, own_amq),
            "rate_fidelity": lambda: rate_fidelity(home, out, seconds, args.rate),
            "generator_pika": lambda: generator(home, out, gen_s),
            "generator_kombu": lambda: generator(home, out, gen_s, client="kombu"),
            "generator_stomp": lambda: generator(home, out, 3, client="stomp"),
            "recording": lambda: recording(out, 100_000 if args.quick else 1_000_000),
            # --quick: the start of the benchmark's own brokers (both at once, so slower; quick
            # figures are not judged) instead of two more starts
            "broker_startup": lambda: (
                own_startup(backend) if args.quick and started else startup(out)
            ),
        }
        results: dict[str, Any] = {}
        try:
            for name, step in steps.items():
                _step(name)
                results[name] = step()
                figures(name, results[name])
            results["peak_rss_mb_bench_process"] = (
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            )
            _step("done")
        finally:
            if started:
                backend.down()
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
