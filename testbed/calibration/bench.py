"""Live micro-benchmarks of calibration (docs/models.md §9) through the broker adapters.

One *stream* is one producer publishing open-loop at a fixed rate (intended times
``t0 + offset + i/rate``; a late producer publishes at once, the lateness is recorded) to a
direct exchange bound to one queue — or, for the fan-out benchmark, to a fanout exchange bound
to n queues — and one manual-ack consumer per queue. Producer and consumers run in their own
threads, each with its own connection (pika: one connection per thread). A *group* of streams
runs concurrently on separate queues (the low-rate points of different configurations); the
first ``warmup`` seconds of messages are published and consumed but not measured.

Per message the stream records: end-to-end latency (consumer receive time − publish time, both
``time.time_ns()`` in this process), publish call time (the adapter's ``publish`` call, no
confirms), write time (publish → confirm; confirming producers wait for each confirm before
the next publish, like the simulator's blocking-confirm producers) and read time (receive →
``ack()`` returned).

Also here: the pipe-throughput probe behind ``queue_service`` (a burst through one queue),
the memory probe behind ``memory`` (queue n messages, read the broker's memory before and
after), and the loopback TCP handshake probe behind ``network_delay``.

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
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import (
    BindingDecl,
    BrokerAdapter,
    Confirm,
    Destination,
    ExchangeDecl,
    Producer,
    QueueDecl,
    make_adapter,
)
from testbed.brokers.base import Declaration
from testbed.calibration.fitting import Summary, summarize
from testbed.core.broker_kinds import KINDS

CONFIRM_TIMEOUT = 30.0
"""Seconds a producer waits for one confirm before counting it failed."""
SETUP_TIMEOUT = 30.0
"""Seconds to wait for all consumers of a group to be subscribed."""
MAX_BEHIND = 2.0
"""A producer this many seconds behind its schedule stops (the broker cannot take the rate;
the point is saturated and would otherwise run on for minutes)."""
LOSS_TOLERANCE = 0.01
"""A point with more than this fraction of measured messages undelivered is saturated."""


@lru_cache(maxsize=16)
def payload(size: int) -> bytes:
    """Incompressible bytes of `size` (cached: the same body for every message of a size)."""
    return os.urandom(size)


@dataclass(frozen=True)
class StreamSpec:
    """One producer → exchange → queue(s) → consumer(s) stream of one calibration point."""

    tag: str
    """Unique name: prefix of the queue/exchange names and of every msg id."""
    config: str
    """base | prefetch1 | confirms | confirms_transient | fanout."""
    load: str
    """low | high | routing."""
    size: int
    rate: float
    warmup: float
    duration: float
    repeat: int = 0
    persistent: bool = True
    confirms: bool = False
    prefetch: int = 100
    fanout: int = 0
    """0: a direct exchange bound to one queue; n ≥ 1: a fanout exchange bound to n queues."""
    offset: float = 0.0
    """Start phase (s) within the group, so concurrent streams do not publish together."""

    @property
    def n_warm(self) -> int:
        return math.ceil(self.warmup * self.rate - 1e-9)

    @property
    def n_total(self) -> int:
        return self.n_warm + max(1, math.ceil(self.duration * self.rate - 1e-9))

    @property
    def planned_seconds(self) -> float:
        return self.offset + self.n_total / self.rate

    @property
    def exchange(self) -> str:
        return f"{self.tag}-x"

    def queues(self) -> list[str]:
        return [f"{self.tag}-q{k}" for k in range(max(self.fanout, 1))]

    def declarations(self) -> list[Declaration]:
        decls: list[Declaration] = [
            ExchangeDecl(self.exchange, "fanout" if self.fanout else "direct", durable=True)
        ]
        for q in self.queues():
            decls.append(QueueDecl(q, durable=True))
            decls.append(BindingDecl(self.exchange, q, "" if self.fanout else q))
        return decls

    def destination(self) -> Destination:
        return Destination.exchange(self.exchange, "" if self.fanout else self.queues()[0])


@dataclass
class StreamRecord:
    """What the threads of one stream observed (appended from several threads: GIL-safe)."""

    spec: StreamSpec
    sent: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    """i -> (publish time ns, publish call ns, lateness s)."""
    write: dict[int, int] = field(default_factory=dict)
    """i -> publish → confirm ns (confirming producers)."""
    confirm_failures: int = 0
    received: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(i, queue index, latency ns, read ns) per delivery."""
    published: int = 0
    producer_done: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    stopped: str = ""
    """Why the producer stopped early ('' when it published all `n_total` messages)."""


@dataclass
class PointStats:
    """One measured point (one stream) reduced to summaries; samples kept for pooling."""

    config: str
    load: str
    rate: float
    size: int
    repeat: int
    fanout: int
    sent: int
    expected: int
    received: int
    achieved_rate: float
    max_lateness: float
    latency: Summary | None
    write: Summary | None
    read: Summary | None
    publish: Summary | None
    saturated: bool
    reason: str
    errors: list[str]
    samples: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def key(self) -> tuple[int, int]:
        return (self.size, self.repeat)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "config", "load", "rate", "size", "repeat", "fanout", "sent", "expected",
                "received", "achieved_rate", "max_lateness", "saturated", "reason", "errors",
            )
        }  # fmt: skip
        for k in ("latency", "write", "read", "publish"):
            s = getattr(self, k)
            out[k] = s.to_json() if s is not None else None
        return out


# --- threads ------------------------------------------------------------------------------------


def _connect(endpoint: BrokerEndpoint, decls: Sequence[Declaration]) -> BrokerAdapter:
    adapter = make_adapter(endpoint)
    adapter.connect()
    try:
        adapter.declare(decls)
    except BaseException:
        adapter.close()
        raise
    return adapter


def _sleep_until(target: float, abort: threading.Event) -> bool:
    """Sleep until monotonic `target`; False if aborted first."""
    while True:
        left = target - time.monotonic()
        if left <= 0:
            return not abort.is_set()
        if abort.wait(min(left, 0.5)):
            return False


def _await_confirm(prod: Producer, msg_id: str, abort: threading.Event) -> Confirm | None:
    deadline = time.monotonic() + CONFIRM_TIMEOUT
    while not abort.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        for c in prod.poll_confirms(timeout=min(left, 1.0)):
            if c.msg_id == msg_id:
                return c
    return None


def _msg_index(msg_id: str) -> int | None:
    try:
        return int(msg_id.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def _produce(
    endpoint: BrokerEndpoint, rec: StreamRecord, t0: float, abort: threading.Event
) -> None:
    spec = rec.spec
    adapter: BrokerAdapter | None = None
    try:
        adapter = _connect(endpoint, spec.declarations())
        prod = adapter.producer(
            spec.destination(), persistent=spec.persistent, confirms=spec.confirms
        )
        body = payload(spec.size)
        behind = max(MAX_BEHIND, 5.0 / spec.rate)
        for i in range(spec.n_total):
            target = t0 + spec.offset + i / spec.rate
            if not _sleep_until(target, abort):
                break
            late = time.monotonic() - target
            if late > behind:
                rec.stopped = f"producer {late:.1f} s behind schedule after {i} messages: stopped"
                break
            msg_id = f"{spec.tag}:{i}"
            c0 = time.perf_counter_ns()
            t_pub = prod.publish(body, msg_id=msg_id)
            call = time.perf_counter_ns() - c0
            rec.sent[i] = (t_pub, call, late)
            if spec.confirms:
                conf = _await_confirm(prod, msg_id, abort)
                if conf is None or not conf.ok:
                    rec.confirm_failures += 1
                else:
                    rec.write[i] = conf.t_ns - t_pub
    except Exception as e:  # recorded, reported with the point
        rec.errors.append(f"producer {spec.tag}: {e!r}")
    finally:
        rec.published = len(rec.sent)
        rec.producer_done.set()
        if adapter is not None:
            adapter.close()


def _consume(
    endpoint: BrokerEndpoint,
    rec: StreamRecord,
    indices: list[int],
    ready: threading.Event,
    abort: threading.Event,
    drain_limit: float,
) -> None:
    spec = rec.spec
    names = spec.queues()
    adapter: BrokerAdapter | None = None
    try:
        adapter = _connect(endpoint, spec.declarations())
        consumers = [
            adapter.consumer(names[k], prefetch=spec.prefetch, ack_mode="manual") for k in indices
        ]
        ready.set()
        counts = [0] * len(indices)
        deadline: float | None = None
        while not abort.is_set():
            for j, c in enumerate(consumers):
                for d in c.drain(0.05 if j == 0 else 0.0):
                    t_recv = d.t_receive_ns
                    d.ack()
                    t_ack = time.time_ns()
                    counts[j] += 1
                    i = _msg_index(d.msg_id)
                    if i is not None and d.t_publish_ns is not None:
                        rec.received.append(
                            (i, indices[j], t_recv - d.t_publish_ns, t_ack - t_recv)
                        )
            if rec.producer_done.is_set():
                if all(n >= rec.published for n in counts):
                    break
                if deadline is None:
                    deadline = time.monotonic() + drain_limit
                elif time.monotonic() > deadline:
                    rec.errors.append(
                        f"consumer {spec.tag}: {rec.published * len(counts) - sum(counts)} "
                        f"message(s) not delivered within {drain_limit:g} s of the last publish"
                    )
                    break
    except Exception as e:
        rec.errors.append(f"consumer {spec.tag}: {e!r}")
    finally:
        ready.set()
        if adapter is not None:
            adapter.close()


def _thread(target: Callable[..., None], *args: Any, name: str) -> threading.Thread:
    t = threading.Thread(target=target, args=args, name=name, daemon=True)
    t.start()
    return t


def delete_topology(
    endpoint: BrokerEndpoint, queues: Sequence[str], exchanges: Sequence[str]
) -> None:
    """Remove calibration queues/exchanges (RabbitMQ; ActiveMQ queues cannot be deleted over
    STOMP and stay, empty). Best effort."""
    if not KINDS[endpoint.kind].deletes_topology:
        return
    adapter: Any = make_adapter(endpoint)
    try:
        adapter.connect()
        ch = adapter.channel()
        for q in queues:
            ch.queue_delete(q)
        for x in exchanges:
            ch.exchange_delete(x)
    except Exception:
        pass
    finally:
        adapter.close()


def run_group(
    endpoint: BrokerEndpoint,
    specs: Sequence[StreamSpec],
    *,
    abort: threading.Event,
    drain_limit: float = 30.0,
) -> list[StreamRecord]:
    """Run `specs` concurrently (one producer thread per stream, consumer threads per queue
    where `KindFacts.calibration_queue_per_consumer` (ActiveMQ), else per stream); return
    what they observed. Bounded in time by the streams' planned length plus `drain_limit` and
    the setup/confirm timeouts."""
    recs = [StreamRecord(s) for s in specs]
    local = threading.Event()

    def chained() -> bool:
        if abort.is_set():
            local.set()
        return local.is_set()

    per_queue = KINDS[endpoint.kind].calibration_queue_per_consumer
    consumers: list[threading.Thread] = []
    owners: dict[threading.Thread, StreamRecord] = {}
    readies: list[threading.Event] = []
    for rec in recs:
        nq = len(rec.spec.queues())
        split = [[k] for k in range(nq)] if per_queue else [list(range(nq))]
        for idx in split:
            ev = threading.Event()
            readies.append(ev)
            t = _thread(
                _consume, endpoint, rec, idx, ev, local, drain_limit,
                name=f"cal-consume-{rec.spec.tag}",
            )  # fmt: skip
            consumers.append(t)
            owners[t] = rec
    setup_end = time.monotonic() + SETUP_TIMEOUT
    for ev in readies:
        ev.wait(max(0.0, setup_end - time.monotonic()))
    t0 = time.monotonic() + 0.3
    producers = []
    for rec in recs:
        t = _thread(_produce, endpoint, rec, t0, local, name=f"cal-produce-{rec.spec.tag}")
        producers.append(t)
        owners[t] = rec
    plan = max(r.spec.planned_seconds for r in recs)
    limit = t0 + plan + max(30.0, plan) + CONFIRM_TIMEOUT
    for t in producers:
        while t.is_alive() and time.monotonic() < limit and not chained():
            t.join(0.5)
    limit = time.monotonic() + drain_limit + 10.0
    for t in consumers:
        while t.is_alive() and time.monotonic() < limit and not chained():
            t.join(0.5)
    local.set()
    for t in [*producers, *consumers]:
        t.join(5.0)
        if t.is_alive():
            owners[t].errors.append(f"thread {t.name} did not finish in time (abandoned)")
    delete_topology(
        endpoint,
        [q for r in recs for q in r.spec.queues()],
        [r.spec.exchange for r in recs],
    )
    return recs


# --- reduction ----------------------------------------------------------------------------------


def _trend_ratio(lat_by_index: list[tuple[int, float]]) -> float:
    """Median latency of the last quarter over that of the first quarter (by publish order)."""
    if len(lat_by_index) < 8:
        return 1.0
    ordered = [v for _, v in sorted(lat_by_index)]
    q = len(ordered) // 4
    first = statistics.median(ordered[:q])
    last = statistics.median(ordered[-q:])
    return last / first if first > 0 else 1.0


def point_stats(rec: StreamRecord) -> PointStats:
    """Reduce one stream to its point: measured (post-warm-up) samples, summaries, saturation.

    Saturated (excluded from the latency fits, kept in the sidecar): more than 1 % of the
    measured copies undelivered, an achieved publish rate below 90 % of the target, or a
    latency that grows through the point (last-quarter median > 3 × first-quarter median
    + 1 ms: a backlog building up).
    """
    s = rec.spec
    nq = len(s.queues())
    warm = s.n_warm
    sent = {i: v for i, v in rec.sent.items() if i >= warm}
    got = [x for x in rec.received if x[0] >= warm]
    lat = [x[2] / 1e9 for x in got]
    read = [x[3] / 1e9 for x in got]
    write = [v / 1e9 for i, v in rec.write.items() if i >= warm]
    pub = [v[1] / 1e9 for v in sent.values()]
    expected = len(sent) * nq
    times = sorted(v[0] for v in rec.sent.values())
    achieved = (len(times) - 1) / ((times[-1] - times[0]) / 1e9) if len(times) > 2 else s.rate
    max_late = max((v[2] for v in rec.sent.values()), default=0.0)
    reasons = [rec.stopped] if rec.stopped else []
    if expected and (expected - len(got)) > LOSS_TOLERANCE * expected:
        reasons.append(f"{expected - len(got)} of {expected} not delivered")
    if len(times) >= 10 and achieved < 0.9 * s.rate:
        reasons.append(f"publish rate {achieved:.3g}/s < 90 % of {s.rate:g}/s")
    ratio = _trend_ratio([(x[0], x[2] / 1e9) for x in got])
    if ratio > 3.0 and lat and statistics.median(lat) > 1e-3:
        reasons.append(f"latency grows through the point (x{ratio:.1f}: backlog)")
    if not got:
        reasons.append("no deliveries")
    return PointStats(
        config=s.config,
        load=s.load,
        rate=s.rate,
        size=s.size,
        repeat=s.repeat,
        fanout=s.fanout,
        sent=len(sent),
        expected=expected,
        received=len(got),
        achieved_rate=achieved,
        max_lateness=max_late,
        latency=summarize(lat),
        write=summarize(write),
        read=summarize(read),
        publish=summarize(pub),
        saturated=bool(reasons),
        reason="; ".join(reasons),
        errors=list(rec.errors),
        samples={"latency": lat, "write": write, "read": read, "publish": pub},
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
    tc = _thread(_pipe_consume, endpoint, spec, burst, name=f"cal-pipe-consume-{tag}")
    burst.ready.wait(SETUP_TIMEOUT)
    tp = _thread(_pipe_produce, endpoint, spec, n, time_cap, burst, name=f"cal-pipe-produce-{tag}")
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
        adapter = _connect(endpoint, spec.declarations())
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
        adapter = _connect(endpoint, spec.declarations())
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
        adapter = _connect(endpoint, spec.declarations())
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
