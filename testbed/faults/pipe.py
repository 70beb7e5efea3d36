"""One proxied connection: its client and upstream sockets and a `Pipe` per direction.

Runs on the proxy's event loop; nothing is thread-safe. Each connection has two pipes
(upstream: client → server, downstream: server → client). A pipe's reader stamps each chunk
with its arrival time and, while no toxic acts on the stream, writes it straight through (the
fast path); otherwise it queues the chunk for the pipe's writer, which passes it through the
stream's toxics in the order they were added. Chunk times are arrival times, so latency does
not add up behind a queue, and bytes never reorder.

A TCP RST from one side travels in-band like an EOF: after the bytes queued before it, through
the stream's toxics (``slow_close`` delays it), then the other side gets a RST. While toxics
act on a stream, what is read is ACKed at once (``TCP_QUICKACK``), see `Pipe._ack_now`.
"""

from __future__ import annotations

__all__ = ["Connection", "Pipe", "READ_SIZE", "QUEUE_LIMIT", "UPSTREAM_CONNECT_TIMEOUT"]

import asyncio
import contextlib
import functools
import logging
import random
import socket
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from testbed.faults.toxic_spec import STREAMS, ToxicSpec
from testbed.faults.toxics import BandwidthToxic, Chunk, Toxic, make_toxic

if TYPE_CHECKING:
    from testbed.faults.link import Link

log = logging.getLogger(__name__)

READ_SIZE = 65536
QUEUE_LIMIT = 4 * 1024 * 1024
"""Bytes a pipe buffers behind its toxics before it stops reading its source (backpressure);
under a bandwidth toxic, one second of data at its rate (at least 64 KiB)."""
UPSTREAM_CONNECT_TIMEOUT = 5.0
_NET_ERRORS = (ConnectionError, OSError, asyncio.IncompleteReadError)
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0), discarding anything unsent."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Pipe:
    """One direction of one connection."""

    def __init__(
        self,
        conn: Connection,
        stream: str,
        src: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        dst: asyncio.StreamWriter,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.src = src[0]
        self.src_sock = src[1].get_extra_info("socket")
        self.dst = dst
        self.toxics: dict[str, Toxic | None] = {}
        """Toxic name → this connection's instance (None: the toxicity draw said no)."""
        self.queue: deque[Chunk | None] = deque()  # None marks EOF
        self.queued = 0
        self.busy = False
        self.holds = 0
        self.source_reset = False
        self.released = asyncio.Event()
        self.released.set()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def active(self) -> list[Toxic]:
        return [t for t in self.toxics.values() if t is not None]

    def hold(self, delta: int) -> None:
        self.holds = max(0, self.holds + delta)
        if self.holds:
            self.released.clear()
        else:
            self.released.set()

    def _limit(self) -> int:
        rates = [
            t.attr("rate") * 1e3
            for t in self.active()
            if isinstance(t, BandwidthToxic) and t.attr("rate") > 0
        ]
        return int(min(QUEUE_LIMIT, max(65536, min(rates)))) if rates else QUEUE_LIMIT

    def _enqueue(self, item: Chunk | None) -> None:
        self.queue.append(item)
        if item is not None:
            self.queued += len(item.data)
            if self.queued >= self._limit():
                self._room.clear()
        self._ready.set()

    async def read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self.holds:
                await self.released.wait()
            try:
                data = await self.src.read(READ_SIZE)
            except ConnectionResetError:
                data, self.source_reset = b"", True
            if not data:  # EOF or RST: passed on in order, after what is queued
                self._enqueue(None)
                return
            if not self.busy and not self.queue and not self.active():
                self.dst.write(data)  # fast path: nothing acts on this stream
                await self.dst.drain()
                continue
            self._enqueue(Chunk(data, loop.time()))
            self._ack_now()
            await self._room.wait()

    def _ack_now(self) -> None:
        """Send the TCP ACK for what was read at once (Linux TCP_QUICKACK).

        While a toxic delays a stream, the bytes the receiver sends back (which would carry the
        ACK) are late too; a sender that uses Nagle's algorithm (ActiveMQ does) would then
        wait for our delayed ACK (up to 40 ms) before its next small write, on top of the toxic.
        """
        if _QUICKACK is not None and self.src_sock is not None:
            with contextlib.suppress(OSError):
                self.src_sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)

    async def write_loop(self) -> None:
        while True:
            while not self.queue:
                self._ready.clear()
                await self._ready.wait()
            item = self.queue.popleft()
            self.busy = True
            if item is None:
                for toxic in self.active():
                    await toxic.on_eof()
                if self.source_reset:
                    self.conn.reset(f"{self.stream}: connection reset by peer")
                    return
                if self.dst.can_write_eof():
                    with contextlib.suppress(*_NET_ERRORS):
                        self.dst.write_eof()
                self.conn.stream_done(self.stream)
                return
            self.queued -= len(item.data)
            if self.queued < self._limit():
                self._room.set()
            await self._through(self.active(), 0, item)
            self.busy = False

    async def _through(self, chain: list[Toxic], i: int, chunk: Chunk) -> None:
        if i == len(chain):
            self.dst.write(chunk.data)
            await self.dst.drain()
            return
        await chain[i].pipe(chunk, functools.partial(self._through, chain, i + 1))


class Connection:
    """A client connection and its upstream connection."""

    def __init__(
        self,
        link: Link,
        seq: int,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        rng: random.Random,
    ) -> None:
        self.link = link
        self.seq = seq
        self.client = client
        self.rng = rng
        self.loop = asyncio.get_running_loop()
        self.pipes: dict[str, Pipe] = {}
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.closed = False
        self.close_reason = ""
        self._done: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._finished = asyncio.Event()

    async def run(self) -> None:
        try:
            self.upstream = await asyncio.wait_for(
                asyncio.open_connection(self.link.upstream_host, self.link.upstream_port),
                UPSTREAM_CONNECT_TIMEOUT,
            )
        except (TimeoutError, *_NET_ERRORS) as exc:
            log.info("link %s: upstream unreachable (%r); resetting client", self.link.name, exc)
            self.closed = True
            _rst(self.client[1])
            return
        if self.closed:  # reset while connecting
            _rst(self.upstream[1])
            return
        c_out, u_out = self.client[1], self.upstream[1]
        self.pipes = {
            "upstream": Pipe(self, "upstream", self.client, u_out),
            "downstream": Pipe(self, "downstream", self.upstream, c_out),
        }
        for spec in self.link.specs.values():
            self.add_toxic(spec)
        for pipe in self.pipes.values():
            self._tasks.append(self.loop.create_task(self._guard(pipe.read_loop(), pipe.stream)))
            self._tasks.append(self.loop.create_task(self._guard(pipe.write_loop(), pipe.stream)))
        await self._finished.wait()

    async def _guard(self, coro: Any, stream: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except ConnectionResetError:
            self.reset(f"{stream}: connection reset by peer")
        except _NET_ERRORS as exc:
            self.close(f"{stream}: {exc!r}")
        except Exception:  # a bug must not leave half a connection open
            log.exception("link %s: connection %d failed", self.link.name, self.seq)
            self.reset(f"{stream}: internal error")

    # ----------------------------------------------------------------- toxics

    def add_toxic(self, spec: ToxicSpec) -> None:
        pipe = self.pipes.get(spec.stream)
        if pipe is None or self.closed:
            return
        toxic = make_toxic(spec, self.rng, self, self.loop)
        pipe.toxics[spec.name] = toxic
        if toxic is not None:
            toxic.start()

    def remove_toxic(self, name: str) -> None:
        for pipe in self.pipes.values():
            toxic = pipe.toxics.pop(name, None)
            if toxic is not None:
                toxic.stop()

    def hold(self, stream: str, delta: int) -> None:
        self.pipes[stream].hold(delta)

    # ----------------------------------------------------------------- ending

    def stream_done(self, stream: str) -> None:
        self._done.add(stream)
        if self._done >= set(STREAMS):
            self.close("both sides closed")

    def _end(self, reason: str) -> list[asyncio.StreamWriter]:
        self.closed = True
        self.close_reason = reason
        for pipe in self.pipes.values():
            for toxic in pipe.active():
                toxic.stop()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._finished.set()
        self.link.conns.discard(self)
        writers = [self.client[1]]
        if self.upstream is not None:
            writers.append(self.upstream[1])
        return writers

    def close(self, reason: str) -> None:
        """Close both sockets gracefully (what is already written is still sent)."""
        if not self.closed:
            for writer in self._end(reason):
                writer.close()

    def reset(self, reason: str) -> None:
        """Close both sockets with a TCP RST."""
        if not self.closed:
            for writer in self._end(reason):
                _rst(writer)
