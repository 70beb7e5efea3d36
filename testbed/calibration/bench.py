"""Live micro-benchmarks of calibration (docs/models.md §9) through the broker adapters.

The stream benchmark — streams of open-loop publishes at a fixed rate, run in groups — is
`testbed.calibration.streams`, its reduction to calibration points `testbed.calibration.points`;
their public names are importable from here too. This module holds the probes: the
pipe-throughput probe behind ``queue_service`` (a burst through one queue), the memory probe
behind ``memory`` (queue n messages, read the broker's memory before and after), and the
loopback TCP handshake probe behind ``network_delay``.

Every wait is bounded; threads are daemons and are abandoned (with an error recorded) if they
do not finish in time.
"""

from __future__ import annotations

__all__ = [
    "MemoryProbe",
    "PipeProbe",
    "PointStats",
    "StreamRecord",
    "StreamSpec",
    "loopback_rtts",
    "measure_memory",
    "pipe_throughput",
    "point_stats",
    "run_group",
]

import math
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import BrokerAdapter
from testbed.calibration.points import PointStats, point_stats
from testbed.calibration.streams import (
    SETUP_TIMEOUT,
    StreamRecord,
    StreamSpec,
    connect,
    delete_topology,
    payload,
    run_group,
    start_thread,
)

# --- pipe throughput (queue service) ------------------------------------------------------------


@dataclass(frozen=True)
class PipeProbe:
    """A burst of `sent` messages through one queue: `seconds` from the first publish to the
    last delivery; `per_message` = seconds / received."""

    size: int
    repeat: int
    sent: int
    received: int
    seconds: float
    per_message: float
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {
            "errors": list(self.errors)
        }


def pipe_throughput(
    endpoint: BrokerEndpoint,
    tag: str,
    size: int,
    n: int,
    *,
    repeat: int = 0,
    time_cap: float = 10.0,
    abort: threading.Event,
) -> PipeProbe:
    """Publish up to `n` persistent messages (no confirms) as fast as the client can, for at
    most `time_cap` s, through a direct exchange to one queue with one consumer (prefetch 100,
    manual ack); the pipe's per-message time is an upper bound of the queue's service time
    (producer, consumer and broker share the machine)."""
    spec = StreamSpec(tag, "pipe", "burst", size, 1.0, 0.0, 1.0, repeat)
    burst = _Burst()
    tc = start_thread(_pipe_consume, endpoint, spec, burst, name=f"cal-pipe-consume-{tag}")
    burst.ready.wait(SETUP_TIMEOUT)
    tp = start_thread(
        _pipe_produce, endpoint, spec, n, time_cap, burst, name=f"cal-pipe-produce-{tag}"
    )
    limit = time.monotonic() + time_cap + 45.0
    for t in (tp, tc):
        while t.is_alive() and time.monotonic() < limit and not abort.is_set():
            t.join(0.5)
    burst.stop.set()
    tp.join(5.0)
    tc.join(5.0)
    delete_topology(endpoint, spec.queues(), [spec.exchange])
    first, last, recv = burst.first, burst.last, burst.recv
    seconds = (last - first) if first is not None and last is not None else math.nan
    per = seconds / recv if recv and seconds == seconds else math.nan
    return PipeProbe(size, repeat, burst.sent, recv, seconds, per, tuple(burst.errors))


@dataclass
class _Burst:
    """What the producer and consumer thread of one pipe burst share (GIL-safe updates)."""

    sent: int = 0
    recv: int = 0
    first: float | None = None
    """Monotonic time of the first publish."""
    last: float | None = None
    """Monotonic time of the last delivery."""
    done: bool = False
    """The producer has stopped publishing."""
    errors: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    """The consumer is subscribed (or has given up)."""
    stop: threading.Event = field(default_factory=threading.Event)
    """Both threads stop: the burst is over or abandoned."""


def _pipe_produce(
    endpoint: BrokerEndpoint, spec: StreamSpec, n: int, time_cap: float, burst: _Burst
) -> None:
    """The burst's producer thread: up to `n` publishes back to back, at most `time_cap` s."""
    adapter: BrokerAdapter | None = None
    try:
        adapter = connect(endpoint, spec.declarations())
        prod = adapter.producer(spec.destination(), persistent=True)
        body = payload(spec.size)
        end = time.monotonic() + time_cap
        burst.first = time.monotonic()
        for i in range(n):
            if burst.stop.is_set() or time.monotonic() > end:
                break
            prod.publish(body, msg_id=f"{spec.tag}:{i}")
            burst.sent = i + 1
    except Exception as e:
        burst.errors.append(f"pipe producer: {e!r}")
    finally:
        burst.done = True
        if adapter is not None:
            adapter.close()


def _pipe_consume(endpoint: BrokerEndpoint, spec: StreamSpec, burst: _Burst) -> None:
    """The burst's consumer thread: ack everything until the producer is done and all it
    sent has arrived, or 30 s after it is done."""
    adapter: BrokerAdapter | None = None
    try:
        adapter = connect(endpoint, spec.declarations())
        c = adapter.consumer(spec.queues()[0], prefetch=100, ack_mode="manual")
        burst.ready.set()
        deadline: float | None = None
        while not burst.stop.is_set():
            for d in c.drain(0.05):
                d.ack()
                burst.recv += 1
                burst.last = time.monotonic()
            if burst.done:
                if burst.recv >= burst.sent:
                    break
                deadline = deadline or time.monotonic() + 30.0
                if time.monotonic() > deadline:
                    burst.errors.append("pipe consumer: not all delivered within 30 s")
                    break
    except Exception as e:
        burst.errors.append(f"pipe consumer: {e!r}")
    finally:
        burst.ready.set()
        if adapter is not None:
            adapter.close()


# --- memory per queued message ------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryProbe:
    """Broker memory (``make_stats_poller(...).poll().memory_bytes``) before and after `n`
    persistent messages of `size` bytes were queued (no consumer)."""

    size: int
    n: int
    before: float
    after: float
    per_message: float
    """(after − before) / n: bytes per queued message, body included."""
    errors: tuple[str, ...] = ()

    @property
    def overhead(self) -> float:
        return self.per_message - self.size

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {
            "overhead": self.overhead, "errors": list(self.errors)
        }  # fmt: skip


def _memory_now(poller: Any, polls: int, spacing: float, abort: threading.Event) -> float | None:
    """Median of the last `polls` readings once two successive readings agree within 1 %
    (at most 3 × `polls` readings, `spacing` s apart): freed garbage settles first."""
    values: list[float] = []
    for k in range(3 * polls):
        if k and abort.wait(spacing):
            break
        st = poller.poll()
        if st.memory_bytes is not None:
            values.append(float(st.memory_bytes))
        if len(values) >= max(polls, 2) and abs(values[-1] - values[-2]) <= 0.01 * max(
            values[-1], 1.0
        ):
            break
    return statistics.median(values[-polls:]) if values else None


def measure_memory(
    endpoint: BrokerEndpoint,
    tag: str,
    size: int,
    n: int,
    *,
    abort: threading.Event,
    polls: int = 3,
    spacing: float = 1.1,
) -> MemoryProbe:
    """Queue `n` persistent messages of `size` (confirmed, pipelined with up to 500 in
    flight), read the broker's memory before and after (median of `polls` polls `spacing` s
    apart, once stable: RabbitMQ refreshes ``mem_used`` once a second here), then drain and
    delete."""
    from testbed.observe.stats import make_stats_poller

    spec = StreamSpec(tag, "memory", "fill", size, 1.0, 0.0, 1.0)
    errors: list[str] = []
    poller = make_stats_poller(endpoint, queues=[])
    adapter: BrokerAdapter | None = None
    before = after = math.nan
    confirmed = 0
    try:
        adapter = connect(endpoint, spec.declarations())
        b = _memory_now(poller, polls, spacing, abort)
        prod = adapter.producer(spec.destination(), persistent=True, confirms=True)
        body = payload(size)
        deadline = time.monotonic() + 120.0
        for i in range(n):
            if abort.is_set() or time.monotonic() > deadline:
                break
            while prod.in_flight >= 500 and time.monotonic() < deadline:
                confirmed += sum(c.ok for c in prod.poll_confirms(0.5))
            prod.publish(body, msg_id=f"{tag}:{i}")
        while prod.in_flight and time.monotonic() < deadline and not abort.is_set():
            confirmed += sum(c.ok for c in prod.poll_confirms(0.5))
        abort.wait(spacing)
        a = _memory_now(poller, polls, spacing, abort)
        if b is None or a is None:
            errors.append("broker memory not reported by the stats poller")
        else:
            before, after = b, a
        c = adapter.consumer(spec.queues()[0], prefetch=1000, ack_mode="auto")
        got = 0
        drain_end = time.monotonic() + 60.0
        while got < confirmed and time.monotonic() < drain_end and not abort.is_set():
            got += len(c.drain(0.2))
        c.close()
    except Exception as e:
        errors.append(f"memory probe: {e!r}")
    finally:
        if adapter is not None:
            adapter.close()
        poller.close()
        delete_topology(endpoint, spec.queues(), [spec.exchange])
    per = (after - before) / confirmed if confirmed else math.nan
    return MemoryProbe(size, confirmed, before, after, per, tuple(errors))


# --- network --------------------------------------------------------------------------------------


def loopback_rtts(n: int = 200, timeout: float = 2.0) -> list[float]:
    """Durations (s) of `n` TCP handshakes (``connect()``) to a listener of ours on
    127.0.0.1: the kernel's loopback round trip as a client sees it. The broker is not
    involved (its port is on the same loopback path)."""
    out: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(n + 8)
        addr = srv.getsockname()
        srv.settimeout(timeout)
        for _ in range(n):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.settimeout(timeout)
            try:
                t0 = time.perf_counter()
                c.connect(addr)
                out.append(time.perf_counter() - t0)
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                pass
            finally:
                c.close()
    return out
