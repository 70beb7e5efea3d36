"""Helpers shared by the fault-injection integration tests (real clients, real brokers)."""

from __future__ import annotations

import socket
import threading
import time

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import make_adapter

AMQP_HEADER = b"AMQP\x00\x00\x09\x01"

DURABLE_SETTLE_S = 3.0
"""Seconds between declaring a durable RabbitMQ queue and SIGKILLing the broker in a test.

RabbitMQ 3.10.8 / Erlang 25 commits a durable-queue declaration as a two-phase mnesia
transaction (ram `rabbit_queue` + disc `rabbit_durable_queue`): the `presume_abort` commit
record reaches LATEST.LOG at once, its `committed` decision record only with mnesia's next
log flush. Killed in between, the node restarts with "Recovering 0 queues" and the queue is
gone with its confirmed persistent messages (seen in CI under load; reproduced: 2 of 8 fresh
brokers lost it when killed at once, 1 of 10 at 0.5 s, 0 of 10 at 2.5 s, with both cores and
the disk busy, `tests/bench/durable_declare_kill.py`; the lost run's LATEST.LOG held the
commit record without its decision). Real topologies are declared long before a crash, and
`mqbed run` declares ≥ 5 s before t=0."""


class Drainer(threading.Thread):
    """A consumer in its own thread (pika wants one owner): (t_receive, t_publish, size) rows."""

    def __init__(self, ep: BrokerEndpoint, queue: str) -> None:
        super().__init__(daemon=True)
        self.ep, self.queue = ep, queue
        self.rows: list[tuple[float, float, int]] = []
        self.ids: list[str] = []
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            adapter = make_adapter(self.ep)
            adapter.connect()
            consumer = adapter.consumer(self.queue, prefetch=500, ack_mode="manual")
            self.ready.set()
            while not self.halt.is_set():
                for d in consumer.drain(0.05):
                    self.rows.append(
                        (d.t_receive_ns / 1e9, (d.t_publish_ns or 0) / 1e9, len(d.body))
                    )
                    self.ids.append(d.msg_id)
                    d.ack()
            adapter.close()
        except BaseException as exc:
            self.error = exc
            self.ready.set()

    def wait_for(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.rows) < n and self.error is None and time.monotonic() < deadline:
            time.sleep(0.02)

    def finish(self) -> None:
        self.halt.set()
        self.join(5.0)


def publish_paced(ep: BrokerEndpoint, queue: str, n: int, rate: float, size: int = 100) -> None:
    a = make_adapter(ep)
    a.connect()
    try:
        producer = a.producer(queue, confirms=True)
        start = time.monotonic()
        for i in range(n):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.publish(b"x" * size, msg_id=f"m{i}")
        deadline = time.monotonic() + 10
        while producer.in_flight and time.monotonic() < deadline:
            producer.poll_confirms(0.1)
    finally:
        a.close()


def read_until_eof(sock: socket.socket, timeout: float) -> tuple[bytes, float, str]:
    """(bytes, seconds until EOF/reset/timeout, how it ended: 'eof' | 'reset' | 'timeout')."""
    sock.settimeout(timeout)
    t0 = time.monotonic()
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data, time.monotonic() - t0, "reset"
        except TimeoutError:
            return data, time.monotonic() - t0, "timeout"
        if not chunk:
            return data, time.monotonic() - t0, "eof"
        data += chunk


def start_frame(port: int) -> bytes:
    """RabbitMQ's Connection.Start frame, as it answers the AMQP protocol header."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(AMQP_HEADER)
        s.settimeout(5)
        data = b""
        while not data.endswith(b"\xce"):
            data += s.recv(65536)
        return data
