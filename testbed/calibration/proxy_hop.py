"""The fault proxy's own transit: what one hop through a proxy link adds (docs/models.md §6).

A scenario with a network fault runs every client through the fault proxy
(`testbed.faults.proxy`) for the whole run, not only while a toxic acts: a publish crosses it
on its way to the broker, a delivery on its way to the consumer, and so do confirms and acks.
Each crossing costs the proxy's event loop a wake-up, a read and a write in Python — time the
calibration's delivery tables, measured on direct connections, do not hold. Measured on this
machine class (2026-11-28, the library's broker-kill scenario, 15,000 deliveries per run): a run
through the proxy had every delivery quantile 0.13-0.15 ms above the same run on direct
connections (p1 0.51 → 0.64 ms, p50 0.94 → 1.09 ms on RabbitMQ), two hops of ~0.07 ms.

`measure_proxy_hop` measures it on the machine at hand, without a broker: round trips of a
small message to a local echo server, directly and through a `FaultProxy` link, alternated pair
by pair so that a slow spell of the machine falls on both. A proxied round trip crosses the
proxy twice, so one hop is half the difference of the two round-trip distributions, quantile by
quantile (floored at 0 and kept non-decreasing). On the machine above: 0.063 ms at p1,
0.091 ms at p50, 0.138 ms at p99 — 0.18 ms for a publish and its delivery at the median, the
0.13-0.15 ms the live runs moved by. Hand-written because no library measures this proxy's
cost; the echo server is the standard library's `socketserver`.

A calibration measures it with the client path (`testbed.calibration.client_path`); a profile
written before that gets it from ``python -m testbed.calibration.proxy_hop --add-to FILE...``,
which measures it on this machine and writes it into each profile's ``client_path`` in place
(the rest of the file, comments included, unchanged).
"""

from __future__ import annotations

__all__ = ["HOP_PAIRS", "HOP_RATE", "add_to_profile", "hop_table", "measure_proxy_hop", "main"]

import argparse
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from testbed.core.atomic import atomic_write_text
from testbed.core.client_path import ClientPath
from testbed.core.quantiles import QuantileTable, quantile_table
from testbed.faults.proxy import FaultProxy

HOP_PAIRS = 1000
"""Round-trip pairs (one direct, one proxied) measured: ~4.5 s at ``HOP_RATE``."""
HOP_RATE = 250.0
"""Pairs per second: a light, steady load, like the proxied scenarios' 100-200 msg/s."""
PAYLOAD = 1024
"""Bytes per message: one segment on loopback, as a small message's frame is."""
DEADLINE_S = 30.0
"""The whole measurement's bound (s): past it the pairs measured so far are used."""
SOCKET_TIMEOUT_S = 5.0


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except OSError:
            return  # the client or the proxy closed the connection


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _round_trip(s: socket.socket, payload: bytes) -> float:
    t = time.perf_counter()
    s.sendall(payload)
    got = 0
    while got < len(payload):
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("the echo connection closed during a round trip")
        got += len(chunk)
    return time.perf_counter() - t


def hop_table(direct: np.ndarray, proxied: np.ndarray) -> QuantileTable:
    """One hop from round trips: half the quantile-wise difference, ≥ 0 and non-decreasing."""
    a, b = quantile_table(proxied), quantile_table(direct)
    diff = (np.asarray(a.q) - np.asarray(b.q)) / 2
    q = np.maximum.accumulate(np.maximum(diff, 0.0))
    return QuantileTable(n=min(a.n, b.n), q=[float(x) for x in q])


def measure_proxy_hop(pairs: int = HOP_PAIRS, rate: float = HOP_RATE) -> QuantileTable:
    """The transit one hop through a fault-proxy link adds, measured here (module docstring)."""
    if pairs < 10 or not rate > 0:
        raise ValueError(f"proxy hop: needs ≥ 10 pairs and a rate > 0, got {pairs}, {rate}")
    payload = b"m" * PAYLOAD
    direct: list[float] = []
    proxied: list[float] = []
    with _EchoServer(("127.0.0.1", 0), _Echo) as server:
        serving = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        serving.start()
        proxy = FaultProxy(api_port=None).start()
        try:
            port = server.server_address[1]
            d, p = _connect(port), _connect(proxy.add_link("hop", "127.0.0.1", port))
            with d, p:
                deadline = time.monotonic() + DEADLINE_S
                for i in range(pairs):
                    order = ((d, direct), (p, proxied))
                    for sock, out in order if i % 2 else order[::-1]:
                        out.append(_round_trip(sock, payload))
                    if time.monotonic() > deadline:
                        break
                    time.sleep(1 / rate)
        finally:
            proxy.stop()
            server.shutdown()
            serving.join(SOCKET_TIMEOUT_S)
    return hop_table(np.asarray(direct), np.asarray(proxied))


def _client_path_span(path: Path, lines: list[str]) -> tuple[int, int]:
    """Where the profile's ``client_path`` starts and its ``provenance`` (the hop goes before
    it); ValueError naming the file when it has neither."""
    try:
        start = lines.index("client_path:\n")
        return start, lines.index("  provenance:\n", start)
    except ValueError:
        raise ValueError(f"{path}: no client_path with a provenance to add the hop to") from None


def add_to_profile(path: Path, hop: QuantileTable, when: str) -> None:
    """Write `hop` into the ``client_path`` of the profile at `path` (replacing one there),
    before its ``provenance``, and say so in the header; the text around it is kept."""
    lines = path.read_text().splitlines(keepends=True)
    start, at = _client_path_span(path, lines)
    if "  proxy_hop:\n" in lines[start:at]:
        first = lines.index("  proxy_hop:\n", start)
        del lines[first:at]
        at = first
    body = yaml.safe_dump({"proxy_hop": hop.model_dump()}, sort_keys=False)
    lines[at:at] = ["  " + line + "\n" for line in body.splitlines()]
    note = f"# Fault proxy hop measured {when} by `python -m testbed.calibration.proxy_hop`.\n"
    lines = [ln for ln in lines if not ln.startswith("# Fault proxy hop measured ")]
    lines.insert(next(i for i, ln in enumerate(lines) if not ln.startswith("#")), note)
    text = "".join(lines)
    ClientPath.model_validate(yaml.safe_load(text)["client_path"])  # still a valid profile
    atomic_write_text(path, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.calibration.proxy_hop",
        description=(
            "Measure one crossing of the fault proxy here; print it, or write it into profiles."
        ),
    )
    ap.add_argument(
        "--add-to", nargs="*", type=Path, default=[], metavar="FILE",
        help="profiles (YAML) to write the measured hop into, in place (default: print only)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    for path in args.add_to:  # every file checked before the measurement, not after it
        try:
            _client_path_span(path, path.read_text().splitlines(keepends=True))
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    hop = measure_proxy_hop()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(
        f"proxy hop (ms): p1 {hop.quantile(0.01) * 1e3:.3f}, p50 {hop.quantile(0.5) * 1e3:.3f},"
        f" p99 {hop.quantile(0.99) * 1e3:.3f}, mean {hop.mean * 1e3:.3f}"
    )
    for path in args.add_to:
        add_to_profile(path, hop, when)
        print(f"written into {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
