"""A producer instance: paces publishes from the scenario's arrival process and records them.

Open loop (poisson, constant, mmpp, ramp, steps, trace): the intended send times come from
:func:`testbed.core.arrivals.schedule`; the loop sleeps until each one, publishes, and records
``t_intended`` next to ``t_publish``. A late send is recorded late — lateness is reported, never
absorbed (no coordinated omission): the schedule does not shift when the producer falls behind.

Closed loop: think (sampled), then publish and block until the broker confirms, then think again.

Works in a plain thread and inside a Locust (gevent) greenlet: every wait is `time.sleep` or an
adapter call, both of which yield under gevent's monkey-patching.
"""

from __future__ import annotations

__all__ = ["ProducerLoop", "body_of"]

import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from testbed.brokers.base import (
    HDR_T_PUBLISH_NS,
    BrokerAdapter,
    Confirm,
    ConfirmTimeout,
    Destination,
    Producer,
)
from testbed.core.arrivals import schedule
from testbed.core.clock import RunClock
from testbed.core.scenario import ClosedArrival, ProducerSpec
from testbed.observe.process_cpu import SPANS
from testbed.observe.recorder import Recorder
from testbed.workload.config import HDR_TYPE
from testbed.workload.crashes import ClientCrash

_PAD = b"m" * (1 << 20)

BURST = 64
"""Most publishes a late open-loop producer hands the adapter before one I/O round (flush).
On schedule every publish is flushed before the next wait, so nothing waits in a buffer."""


def body_of(size: int) -> bytes:
    """A message body of exactly `size` bytes (sizes above 1 MiB are built on demand)."""
    return _PAD[:size] if size <= len(_PAD) else b"m" * size


class ProducerLoop:
    """One producer instance of a producer group."""

    confirm_wait = 10.0
    """Seconds to wait at the end for outstanding confirms (then they count as unconfirmed)."""

    def __init__(
        self,
        spec: ProducerSpec,
        adapter: BrokerAdapter,
        recorder: Recorder,
        clock: RunClock,
        rng: np.random.Generator,
        instance: str,
        stop_at: float,
        should_stop: Callable[[], bool] = lambda: False,
        send_type: bool = True,
        router: Callable[[], str] | None = None,
        arrivals: np.random.Generator | None = None,
    ):
        """`rng` draws sizes and routing keys; `arrivals` (default `rng`) the send schedule,
        which `testbed.core.seeds.arrival_rng` pairs with the simulator's."""
        self.spec = spec
        self.adapter = adapter
        self.recorder = recorder
        self.clock = clock
        self.rng = rng
        self.arrivals = rng if arrivals is None else arrivals
        self.name = instance
        self.stop_at = min(stop_at, spec.stop) if spec.stop is not None else stop_at
        self.should_stop = should_stop
        self.send_type = send_type
        self.resume_at = 0.0
        self._schedule: Iterator[float] | None = None
        self.sent = 0
        self.confirmed = 0
        self.failed = 0
        self.returned = 0
        self._pending: dict[str, tuple[Any, ...]] = {}
        self._unflushed = 0
        self._size = spec.size.sampler(rng)
        self._prefix = f"{recorder.id_prefix}{instance}."
        keys = spec.routing_key
        self._keys: list[str] | None = keys if isinstance(keys, list) else None
        self._key = keys if isinstance(keys, str) else None
        self._router = router
        """Elastic alias (docs/models.md §7): the member queue of each message, by ratio; the alias
        is a direct exchange binding each member under its own name."""
        if router is not None and spec.queue is not None:
            self.destination = Destination.exchange(spec.queue)
        elif spec.queue is not None:
            self.destination = Destination.queue(spec.queue)
        else:
            self.destination = Destination.exchange(spec.exchange or "", self._key or "")

    # -- one publish ------------------------------------------------------------------------

    def _next(self) -> tuple[str, bytes, dict[str, Any], str | None, int]:
        msg_id = f"{self._prefix}{self.sent}"
        size = max(0, int(self._size()))
        if self._router is not None:
            key: str | None = self._router()
        else:
            key = self._keys[int(self.rng.integers(len(self._keys)))] if self._keys else self._key
        # attempt 1 is implied; the type travels only when a consumer filters on it (chains)
        headers = {HDR_TYPE: self.spec.type_label} if self.send_type else {}
        self.sent += 1
        return msg_id, body_of(size), headers, key, size

    def _publish(self, producer: Producer, t_intended: float | None, burst: bool = False) -> None:
        SPANS.start()
        try:
            self._send(producer, t_intended, burst)
        finally:
            SPANS.publish_s += SPANS.stop()

    def _send(self, producer: Producer, t_intended: float | None, burst: bool) -> None:
        msg_id, body, headers, key, size = self._next()
        flush = not burst or self._unflushed >= BURST - 1
        try:
            t_ns = producer.publish(
                body, msg_id=msg_id, headers=headers, routing_key=key, flush=flush
            )
        except self.adapter.connection_errors as e:  # type: ignore[misc]
            self._record(msg_id, key, size, t_intended, self.clock.now(), None, ok=False)
            self.recorder.event(self.clock.now(), "publish_error", self.name, {"error": str(e)})
            raise
        self._unflushed = 0 if flush else self._unflushed + 1
        t_publish = self.clock.of_ns(t_ns)
        if self.spec.confirms:
            self._pending[msg_id] = (key, size, t_intended, t_publish)
        else:
            self._record(msg_id, key, size, t_intended, t_publish, t_publish, ok=True)

    def _record(
        self,
        msg_id: str,
        key: str | None,
        size: int,
        t_intended: float | None,
        t_publish: float | None,
        t_confirm: float | None,
        ok: bool,
    ) -> None:
        queue = self.spec.queue or self.spec.exchange or ""
        self.recorder.message(
            msg_id,
            self.spec.type_label,
            queue,
            self.spec.name,
            size,
            t_intended,
            t_publish,
            t_confirm,
            ok,
        )

    def _settle(self, confirms: list[Confirm]) -> None:
        for c in confirms:
            row = self._pending.pop(c.msg_id, None)
            if c.returned:
                self.returned += 1
                self._unroutable(c, row)
                if row is None:  # no confirms: its messages row is written already
                    continue
            if row is None:
                self.failed += 1
                self.recorder.event(
                    self.clock.now(),
                    "unknown_confirm",
                    self.name,
                    {"msg_id": c.msg_id, "detail": c.detail},
                )
                continue
            key, size, t_intended, t_publish = row
            if c.ok:
                self.confirmed += 1
                self._record(
                    c.msg_id, key, size, t_intended, t_publish, self.clock.of_ns(c.t_ns), True
                )
            else:
                self.failed += 1
                self._record(c.msg_id, key, size, t_intended, t_publish, None, False)

    def _unroutable(self, c: Confirm, row: tuple[Any, ...] | None) -> None:
        """The broker returned a ``mandatory`` publish that no queue took (a transient
        subscription's consumer was away): its ``unroutable`` row (the ledger's count)."""
        t = self.clock.of_ns(c.t_ns)
        size = row[1] if row is not None else 0
        queue = self.spec.queue or self.spec.exchange or ""
        self.recorder.delivery(c.msg_id, queue, "", 1, t, t, "unroutable", False, None, size)

    # -- loops ------------------------------------------------------------------------------

    def run(self, resume_at: float = 0.0) -> None:
        """Publish until the stop time. After a crash, `run(resume_at=now)` goes on with the
        original schedule from `resume_at` (the sends it missed while down never happen) and
        message ids continue where they stopped."""
        self.resume_at = resume_at
        producer = self.adapter.producer(
            self.destination,
            persistent=self.spec.persistent,
            confirms=self.spec.confirms,
            mandatory=self.spec.mandatory,
        )
        try:
            if isinstance(self.spec.arrival, ClosedArrival):
                self._closed_loop(producer)
            else:
                self._open_loop(producer)
        except BaseException as e:  # crash, lost connection, stop: in-flight stays unconfirmed
            self._abort(crashed=isinstance(e, ClientCrash))
            raise
        self._finish(producer)

    def _missed(self, t_intended: float) -> None:
        """A send the open-loop schedule wanted while the producer was crashed or cut off: a
        `messages` row with no publish time (sent = attempted; never confirmed)."""
        msg_id, _, _, key, size = self._next()
        self._record(msg_id, key, size, t_intended, None, None, ok=False)

    def _abort(self, crashed: bool) -> None:
        """Abrupt end: publishes still waiting for a confirm stay unconfirmed (counted, not
        hidden: the ledger reports them as unconfirmed, or recovered if delivered)."""
        for msg_id, (key, size, t_intended, t_publish) in list(self._pending.items()):
            self._record(msg_id, key, size, t_intended, t_publish, None, ok=False)
        self._pending.clear()
        if crashed:
            self.recorder.event(self.clock.now(), "producer_crashed", self.name, {})

    def _wait_until(self, producer: Producer, t: float) -> None:
        while True:
            delay = t - self.clock.now()
            if delay <= 0:
                return
            if self._unflushed:  # about to wait: what is buffered goes out first
                producer.flush()
                self._unflushed = 0
                continue
            if self.spec.confirms and self._pending:
                self._settle(producer.poll_confirms(timeout=delay))
            else:
                if self.spec.mandatory:  # returns come back without confirms too
                    self._settle(producer.poll_confirms(0.0))
                time.sleep(delay)

    def _open_loop(self, producer: Producer) -> None:
        limit = self.spec.max_messages or math.inf
        n = 0
        resume = self.resume_at
        if self._schedule is None:  # one schedule for the instance's life, across restarts
            self._schedule = schedule(
                self.spec.arrival, self.arrivals, self.spec.start, self.stop_at
            )
        for t_intended in self._schedule:
            if t_intended < resume:
                self._missed(t_intended)  # due while the producer was down: counted, not hidden
                continue
            if self.sent >= limit or self.should_stop():
                break
            try:
                self._wait_until(producer, t_intended)
            except BaseException:  # cut off while waiting for it: the send is still due
                self._schedule = itertools.chain([t_intended], self._schedule)
                raise
            self._publish(producer, t_intended, burst=True)
            n += 1
            if self.spec.confirms and (n & 63) == 0:
                self._settle(producer.poll_confirms(0.0))

    def _closed_loop(self, producer: Producer) -> None:
        assert isinstance(self.spec.arrival, ClosedArrival)
        think = self.spec.arrival.think_time.sampler(self.rng)
        limit = self.spec.max_messages or math.inf
        self._wait_until(producer, max(self.spec.start, self.resume_at))
        while self.sent < limit and not self.should_stop():
            self._wait_until(producer, self.clock.now() + think())
            t_intended = self.clock.now()
            if t_intended >= self.stop_at:
                break
            if not self.spec.confirms:
                self._publish(producer, t_intended)
            else:
                msg_id, body, headers, key, size = self._next()
                t_ns = time.time_ns()
                headers[HDR_T_PUBLISH_NS] = t_ns
                try:
                    c = producer.publish_and_wait(
                        body, msg_id=msg_id, headers=headers, routing_key=key, timeout=30.0
                    )
                except ConfirmTimeout:
                    self._record(
                        msg_id, key, size, t_intended, self.clock.of_ns(t_ns), None, ok=False
                    )
                    self.failed += 1
                else:
                    self._record(
                        msg_id,
                        key,
                        size,
                        t_intended,
                        self.clock.of_ns(t_ns),
                        self.clock.of_ns(c.t_ns) if c.ok else None,
                        c.ok,
                    )
                    self.confirmed += int(c.ok)
                    if c.returned:
                        self._unroutable(c, (key, size))

    def _finish(self, producer: Producer) -> None:
        deadline = time.monotonic() + self.confirm_wait
        try:
            if self._unflushed:
                producer.flush()
                self._unflushed = 0
            while self._pending and time.monotonic() < deadline:
                self._settle(producer.poll_confirms(timeout=0.2))
            if self.spec.mandatory and not self.spec.confirms:
                time.sleep(0.2)  # the last returns: a round trip after their publish
                self._settle(producer.poll_confirms(0.0))
        except self.adapter.connection_errors:  # type: ignore[misc]
            pass
        for msg_id, (key, size, t_intended, t_publish) in list(self._pending.items()):
            self._record(msg_id, key, size, t_intended, t_publish, None, ok=False)
        self._pending.clear()
        try:
            producer.close()
        except self.adapter.connection_errors:  # type: ignore[misc]
            pass
