"""Toxics of the fault proxy: Toxiproxy's names, fields and units, one object per connection.

A toxic is described by a `ToxicSpec` (what the HTTP API and `FaultProxy.add_toxic` take, in
Toxiproxy's JSON shape; checked in `testbed.faults.toxic_spec`) and acts through a `Toxic` — one
instance per connection and stream, made when the toxic is added or the connection opens, *if*
the per-connection toxicity draw says it applies (`applies`, as Toxiproxy does).

Streams: ``upstream`` = client → server, ``downstream`` = server → client (Toxiproxy's default).

Types and attributes (Toxiproxy units) → effect on the stream:

- ``latency``: latency ms, jitter ms → each chunk leaves ``latency ± U(jitter)`` after it
  arrived; order kept.
- ``bandwidth``: rate KB/s (1 KB = 1000 B; 0 = unlimited) → bytes leave at ``rate``.
- ``slow_close``: delay ms → the close (EOF) is passed on ``delay`` late.
- ``timeout``: timeout ms (0 = never close) → data is dropped; the connection is closed
  after ``timeout``.
- ``reset_peer``: timeout ms → data passes; both sockets get a TCP RST after ``timeout``.
- ``slicer``: average_size B, size_variation B, delay µs → chunks cut into pieces of
  ``average_size ± U(size_variation)``, ``delay`` between them.
- ``limit_data``: bytes → after ``bytes`` bytes the connection is closed.
- ``down``: mode refuse | blackhole → a partition (below).
- ``loss``: probability, retransmit_delay ms (default 200) → with ``probability`` a chunk (one
  read, ≤ 64 KiB) is held for ``retransmit_delay``, as a TCP retransmission would hold the
  stream: later bytes wait behind it, none are lost.

``down``: ``refuse`` acts on the whole link — existing connections get a RST and new ones are
refused (ECONNREFUSED) until it is removed; toxicity must be 1. ``blackhole`` holds the stream
of the connections it applies to: nothing is read or forwarded, data waits in the kernel
buffers as it would during a real partition, and flows on in order once the toxic is removed.

Deviations from Toxiproxy, on purpose: ``timeout`` and ``reset_peer`` count their timeout from
when the toxic starts acting on the connection (Toxiproxy restarts ``timeout`` at every chunk
and arms ``reset_peer`` only at the first chunk, which never comes on an idle AMQP consumer
link); ``down`` and ``loss`` are ours.
"""

from __future__ import annotations

__all__ = ["BandwidthToxic", "Chunk", "ConnectionOps", "Toxic", "make_toxic"]

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from testbed.faults.toxic_spec import (
    ToxicSpec,
    applies,
)

# --- runtime ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Chunk:
    """Bytes read from one side, with the loop time (`loop.time()`) they arrived at."""

    data: bytes
    t: float


Emit = Callable[[Chunk], Awaitable[None]]


class ConnectionOps(Protocol):
    """What a toxic may do to the connection it acts on."""

    def close(self, reason: str) -> None:
        """Close both sockets gracefully (FIN)."""
        ...

    def reset(self, reason: str) -> None:
        """Close both sockets with a TCP RST."""
        ...

    def hold(self, stream: str, delta: int) -> None:
        """Stop (+1) / resume (-1) reading the source of `stream` (a blackhole)."""
        ...


class Toxic:
    """Per-connection, per-stream behaviour of one `ToxicSpec`. The base passes data through."""

    def __init__(
        self,
        spec: ToxicSpec,
        rng: random.Random,
        conn: ConnectionOps,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.spec = spec
        self.rng = rng
        self.conn = conn
        self.loop = loop
        self.stopped = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def attr(self, key: str) -> float:
        return float(self.spec.attributes[key])

    def start(self) -> None:
        """Called once when the toxic starts acting on the connection."""

    def stop(self) -> None:
        """The toxic was removed (or the connection ends): wake a held chunk, drop timers."""
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        await emit(chunk)

    async def on_eof(self) -> None:
        """The source closed its side; runs before the close is passed on."""

    async def sleep_until(self, when: float | None) -> None:
        """Sleep until loop time `when` (forever if None); returns early when stopped."""
        if self.stopped or (when is not None and when <= self.loop.time()):
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._waiter = fut
        handle = None if when is None else self.loop.call_at(when, _resolve, fut)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            self._waiter = None

    def after(self, delay_s: float, action: Callable[[], None]) -> None:
        self._timer = self.loop.call_later(max(0.0, delay_s), action)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class LatencyToxic(Toxic):
    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        delay = self.attr("latency")
        jitter = self.attr("jitter")
        if jitter:
            delay += self.rng.uniform(-jitter, jitter)
        await self.sleep_until(chunk.t + max(0.0, delay) / 1e3)
        chunk.t = self.loop.time()
        await emit(chunk)


class BandwidthToxic(Toxic):
    """Token accounting on an absolute schedule: no drift from oversleeping."""

    _piece_s = 0.1  # pieces of at most 100 ms of transmission, like Toxiproxy

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._free_at = 0.0

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        rate = self.attr("rate") * 1000.0  # bytes/s
        if rate <= 0 or self.stopped:
            await emit(chunk)
            return
        self._free_at = max(self._free_at, self.loop.time())
        step = max(1, int(rate * self._piece_s))
        data = chunk.data
        for i in range(0, len(data), step):
            piece = data[i : i + step]
            self._free_at += len(piece) / rate
            await self.sleep_until(self._free_at)
            await emit(Chunk(piece, self.loop.time()))


class SlowCloseToxic(Toxic):
    async def on_eof(self) -> None:
        await self.sleep_until(self.loop.time() + self.attr("delay") / 1e3)


class TimeoutToxic(Toxic):
    def start(self) -> None:
        timeout = self.attr("timeout")
        if timeout > 0:
            self.after(timeout / 1e3, lambda: self.conn.close(f"timeout toxic {self.spec.name!r}"))

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        if self.stopped:  # removed while this chunk was on its way: let it through
            await emit(chunk)


class ResetPeerToxic(Toxic):
    def start(self) -> None:
        self.after(
            self.attr("timeout") / 1e3, lambda: self.conn.reset(f"reset_peer {self.spec.name!r}")
        )


class SlicerToxic(Toxic):
    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        avg = int(self.attr("average_size"))
        var = int(self.attr("size_variation"))
        delay = self.attr("delay") / 1e6
        data, pos = chunk.data, 0
        while pos < len(data):
            size = max(1, avg + (self.rng.randint(-var, var) if var else 0))
            piece = data[pos : pos + size]
            pos += len(piece)
            await emit(Chunk(piece, self.loop.time()))
            if pos < len(data) and delay > 0:
                await self.sleep_until(self.loop.time() + delay)


class LimitDataToxic(Toxic):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.passed = 0

    def start(self) -> None:
        if self.attr("bytes") <= 0:
            self.conn.close(f"limit_data {self.spec.name!r}: limit 0 bytes")

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        limit = int(self.attr("bytes"))
        room = limit - self.passed
        if room > 0:
            piece = chunk.data[:room]
            self.passed += len(piece)
            await emit(Chunk(piece, chunk.t))
        if self.passed >= limit and not self.stopped:
            self.conn.close(f"limit_data {self.spec.name!r}: {limit} bytes passed")


class BlackholeToxic(Toxic):
    """``down`` with mode blackhole: the stream is held (not read, not forwarded)."""

    def start(self) -> None:
        self.conn.hold(self.spec.stream, +1)

    def stop(self) -> None:
        if not self.stopped:
            self.conn.hold(self.spec.stream, -1)
        super().stop()

    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        await self.sleep_until(None)
        await emit(chunk)


class LossToxic(Toxic):
    async def pipe(self, chunk: Chunk, emit: Emit) -> None:
        if self.rng.random() < self.attr("probability"):
            await self.sleep_until(self.loop.time() + self.attr("retransmit_delay") / 1e3)
        await emit(chunk)


_CLASSES: dict[str, type[Toxic]] = {
    "latency": LatencyToxic,
    "bandwidth": BandwidthToxic,
    "slow_close": SlowCloseToxic,
    "timeout": TimeoutToxic,
    "reset_peer": ResetPeerToxic,
    "slicer": SlicerToxic,
    "limit_data": LimitDataToxic,
    "down": BlackholeToxic,
    "loss": LossToxic,
}


def make_toxic(
    spec: ToxicSpec, rng: random.Random, conn: ConnectionOps, loop: asyncio.AbstractEventLoop
) -> Toxic | None:
    """The toxic's per-connection instance, or None when the toxicity draw says it does not
    act on this connection (or it is a link-wide refusal, handled by the link)."""
    if spec.refuses or not applies(spec.toxicity, rng):
        return None
    return _CLASSES[spec.type](spec, rng, conn, loop)
