"""The stream benchmark of calibration (docs/models.md §9) through the broker adapters.

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
``ack()`` returned). `testbed.calibration.points` reduces a stream to its point.

Every wait is bounded; threads are daemons and are abandoned (with an error recorded) if they
do not finish in time.
"""

from __future__ import annotations

__all__ = [
    "StreamRecord",
    "StreamSpec",
    "connect",
    "delete_topology",
    "payload",
    "run_group",
    "start_thread",
]

import math
import os
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
from testbed.core.broker_kinds import KINDS

CONFIRM_TIMEOUT = 30.0
"""Seconds a producer waits for one confirm before counting it failed."""
SETUP_TIMEOUT = 30.0
"""Seconds to wait for all consumers of a group to be subscribed."""
MAX_BEHIND = 2.0
"""A producer this many seconds behind its schedule stops (the broker cannot take the rate;
the point is saturated and would otherwise run on for minutes)."""


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


# --- threads ------------------------------------------------------------------------------------


def connect(endpoint: BrokerEndpoint, decls: Sequence[Declaration]) -> BrokerAdapter:
    """A connected adapter of its own (one per thread) with `decls` declared."""
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
        adapter = connect(endpoint, spec.declarations())
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
        adapter = connect(endpoint, spec.declarations())
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


def start_thread(target: Callable[..., None], *args: Any, name: str) -> threading.Thread:
    """`target(*args)` in a started daemon thread (abandoned if it does not finish)."""
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
            t = start_thread(
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
        t = start_thread(_produce, endpoint, rec, t0, local, name=f"cal-produce-{rec.spec.tag}")
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
