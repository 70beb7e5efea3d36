"""Fault proxy cost: added round-trip latency and throughput, direct vs through a link.

    .venv/bin/python tests/bench/bench_proxy.py            # ~30 s on a 2-vCPU machine
    .venv/bin/python tests/bench/bench_proxy.py --quick    # fewer round trips, smaller transfer

A plain script that prints figures (not a timed unit test). The proxy runs as its own process
(``python -m testbed.faults.proxy``, driven over its HTTP API by `ProxyClient`), the TCP echo
server, the sink and the clients run in this process, everything on 127.0.0.1:

1. Latency: ping-pong of 64-byte messages over TCP_NODELAY sockets to an echo server; p50/p99 of
   the round trip direct, through a link with no toxic (fast path), and through a link with a
   0 ms latency toxic (the queued path every toxic uses), in 5 interleaved rounds (the machine
   is shared; its load changes under us). A round trip crosses the proxy twice.
2. Throughput: a bulk transfer of 256 KiB writes to a sink that counts bytes; MB/s direct and
   through a link (best of 3).

Besides that human output it prints each figure as a record of `mqbed bench`'s figure protocol
(``mqbed-figure {...}`` lines, testbed/bench/figures.py); the targets and where they come from
are in testbed/bench/catalogue.py.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from testbed.bench.catalogue import emit  # noqa: E402
from testbed.faults.api import ProxyClient  # noqa: E402

HOST = "127.0.0.1"


def serve(handler: object) -> int:
    """A threaded TCP server on 127.0.0.1 calling `handler(conn)` per connection; its port."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((HOST, 0))
    srv.listen(64)

    def accept() -> None:
        while True:
            conn, _ = srv.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handler, args=(conn,), daemon=True).start()  # type: ignore[arg-type]

    threading.Thread(target=accept, daemon=True).start()
    return int(srv.getsockname()[1])


def echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def sink(conn: socket.socket) -> None:
    with conn:
        total = 0
        while data := conn.recv(1 << 20):
            total += len(data)
        conn.sendall(str(total).encode())


def ping_pong(port: int, n: int, size: int = 64) -> np.ndarray:
    """Round-trip times (s) of `n` messages after 200 warm-up ones."""
    msg = b"x" * size
    rtts = np.empty(n)
    with socket.create_connection((HOST, port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(-200, n):
            t0 = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < size:
                got += len(s.recv(size - got))
            if i >= 0:
                rtts[i] = time.perf_counter() - t0
    return rtts


def bulk(port: int, total: int) -> float:
    """MB/s of a `total`-byte transfer to the sink (until the sink has counted it all)."""
    buf = b"y" * (256 * 1024)
    with socket.create_connection((HOST, port)) as s:
        t0 = time.perf_counter()
        sent = 0
        while sent < total:
            s.sendall(buf)
            sent += len(buf)
        s.shutdown(socket.SHUT_WR)
        counted = int(s.recv(64))
        elapsed = time.perf_counter() - t0
    assert counted == sent, (counted, sent)
    return sent / elapsed / 1e6


def start_proxy() -> tuple[subprocess.Popen[str], ProxyClient]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.faults.proxy", "--api-port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not match:
        proc.kill()
        raise SystemExit(f"proxy did not start: {line!r}")
    return proc, ProxyClient(match.group(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 2000 if args.quick else 10_000
    total = (64 if args.quick else 256) * 1024 * 1024

    echo_port, sink_port = serve(echo), serve(sink)
    proc, proxy = start_proxy()
    try:
        echo_link = proxy.add_link("echo", HOST, echo_port)
        echo_toxic = proxy.add_link("echo-toxic", HOST, echo_port)
        proxy.add_toxic("echo-toxic", {"type": "latency", "attributes": {"latency": 0}})
        proxy.add_toxic(
            "echo-toxic", {"type": "latency", "stream": "upstream", "attributes": {"latency": 0}}
        )
        sink_link = proxy.add_link("sink", HOST, sink_port)

        print(f"fault proxy benchmark — {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
        print(f"\nround trip of 64-byte messages, {n} each (ms)")
        print(f"{'path':<36}{'p50':>8}{'p99':>8}{'mean':>8}")
        paths = [
            ("direct", echo_port),
            ("proxy, no toxic (fast path)", echo_link),
            ("proxy, 0 ms latency toxic (queued)", echo_toxic),
        ]
        samples: dict[str, list[np.ndarray]] = {label: [] for label, _ in paths}
        rounds = 5  # interleaved, rotating order: the machine's load changes under us
        for k in range(rounds):
            for label, port in paths[k % 3 :] + paths[: k % 3]:
                samples[label].append(ping_pong(port, n // rounds) * 1e3)
        results = {label: np.concatenate(parts) for label, parts in samples.items()}
        for label, r in results.items():
            print(
                f"{label:<36}{np.percentile(r, 50):8.3f}{np.percentile(r, 99):8.3f}{r.mean():8.3f}"
            )
        print("(a round trip crosses the proxy twice)")
        base = results["direct"]
        added = {}
        for (label, r), suffix in zip(list(results.items())[1:], ("", "_toxic"), strict=True):
            p50 = np.percentile(r, 50) - np.percentile(base, 50)
            p99 = np.percentile(r, 99) - np.percentile(base, 99)
            print(f"added: {label.removeprefix('proxy, '):<29}{p50:8.3f}{p99:8.3f}")
            added |= {f"added_p50{suffix}": float(p50), f"added_p99{suffix}": float(p99)}
        for key, ms in added.items():
            emit(f"fault-proxy.{key}", ms)

        print(f"\nbulk transfer of {total >> 20} MiB (MB/s, best of 3)")
        direct = max(bulk(sink_port, total) for _ in range(3))
        proxied = max(bulk(sink_link, total) for _ in range(3))
        print(f"{'direct':<36}{direct:8.0f}")
        print(f"{'through the proxy':<36}{proxied:8.0f}   ({proxied / direct:.0%} of direct)")
        emit("fault-proxy.throughput", proxied, anchor=direct, note=f"{total >> 20} MiB transfers")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
