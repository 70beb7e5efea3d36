"""A thin STOMP 1.2 session over stomp.py for ActiveMQ: bounded connect, subscriptions with
their own frame queues, receipts routed to a hook, disconnect noticed.

stomp.py reads frames on its own receiver thread (a greenlet under gevent monkey-patching);
this module hands frames to the caller's thread through `queue.Queue`s and condition variables,
so callers never run code on the receiver thread.
"""

from __future__ import annotations

__all__ = ["StompSession", "Subscription"]

import contextlib
import itertools
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import stomp
import stomp.exception
from stomp.utils import Frame as stomp_frame
from stomp.utils import convert_frame as stomp_convert
from stomp.utils import pack as stomp_pack

from testbed.brokers.base import ConnectionLost

ReceiptHook = Callable[[str, bool, str], None]
"""hook(receipt_id, ok, detail) for receipts this session did not ask for itself."""

STOMP_ERRORS: tuple[type[BaseException], ...] = (
    stomp.exception.StompException,
    OSError,
)


@dataclass
class Subscription:
    """One SUBSCRIBE: frames for it arrive in `frames` (None = connection lost)."""

    id: str
    destination: str
    frames: queue.Queue[Any] = field(default_factory=queue.Queue)


def _nodelay(sock: socket.socket | None) -> None:
    """Turn Nagle's algorithm off on the session's socket, as pika and py-amqp do on theirs and
    the broker's connector does on its side (``transport.tcpNoDelay``); stomp.py leaves it on.

    With Nagle on, a small frame written while the previous one is not yet acknowledged waits in
    the kernel for the broker's delayed ACK: the producer's SENDs reached ActiveMQ in bursts
    every 15-45 ms and consumers' ACKs late. Measured on the fan-out 1 -> 10 at 100 msg/s: the
    fastest of each message's ten copies took a median 26 ms (RabbitMQ: 2.6 ms), every consumer
    stalled at once ~10 times a second, and mean latency was 37.7 ms; with this, 2.8 ms, no
    such stalls, and 12.7 ms. The load generator must not add a delay the broker does not have.
    """
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, session: StompSession) -> None:
        self.s = session

    def on_connected(self, frame: Any) -> None:
        self.s._connected.set()

    def on_message(self, frame: Any) -> None:
        sub = self.s._subs.get(frame.headers.get("subscription", ""))
        if sub is not None:
            sub.frames.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.s._receipt(frame.headers.get("receipt-id", ""), True, "")

    def on_error(self, frame: Any) -> None:
        msg = frame.headers.get("message", "") or str(frame.body)[:200]
        rid = frame.headers.get("receipt-id")
        self.s.last_error = msg
        if rid:
            self.s._receipt(rid, False, f"ERROR frame: {msg}")
        self.s._connected.set()  # wake a connect() waiting on a refused login

    def on_disconnected(self) -> None:
        self.s._lost()


class StompSession:
    """One STOMP connection. Thread-safe for send/ack/nack (stomp.py serialises socket writes)."""

    def __init__(
        self,
        host: str,
        port: int,
        username: str,
        password: str,
        *,
        connect_timeout: float = 5.0,
        on_receipt: ReceiptHook | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.where = f"activemq at {host}:{port}"
        self._host, self._port = host, port
        self._user, self._password = username, password
        self._timeout = connect_timeout
        self._hook = on_receipt
        self._on_lost = on_lost
        self._subs: dict[str, Subscription] = {}
        self._ctl: dict[str, threading.Event] = {}
        self._ctl_ok: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]
        self._connected = threading.Event()
        self._conn: Any = None
        self.alive = False
        self.last_error: str | None = None

    def connect(self) -> None:
        conn = stomp.Connection12(
            [(self._host, self._port)],
            heartbeats=(0, 0),
            reconnect_attempts_max=1,
            # stomp.py sleeps this long after a failed attempt even when it makes no other,
            # in 0.2 s steps: 0.2 s on every refused connect, which put ActiveMQ clients back
            # 0.62 s (3 tries) and 0.82 s (4) after the backoff's 1.5 and 3.1 s (the runner
            # has its own backoff, testbed.workload.users)
            reconnect_sleep_initial=0.0,
            timeout=self._timeout,
        )
        conn.set_listener("mqbed", _Listener(self))
        self._connected.clear()
        self.last_error = None
        try:
            conn.connect(self._user, self._password, wait=False)
        except STOMP_ERRORS as e:
            raise ConnectionLost(f"connect to {self.where}: {e!r}") from e
        if not self._connected.wait(self._timeout) or self.last_error or not conn.is_connected():
            self._stop(conn)
            why = self.last_error or f"no CONNECTED frame within {self._timeout} s"
            raise ConnectionLost(f"connect to {self.where}: {why}")
        _nodelay(conn.transport.socket)
        self._conn = conn
        self.alive = True

    def _stop(self, conn: Any, grace: float = 2.0) -> None:
        """DISCONNECT (the receipt closes the socket); force the socket shut after `grace` s."""
        with contextlib.suppress(*STOMP_ERRORS):
            conn.disconnect()
        deadline = time.monotonic() + grace
        while conn.is_connected() and time.monotonic() < deadline:
            time.sleep(0.005)
        with contextlib.suppress(*STOMP_ERRORS):
            conn.transport.disconnect_socket()

    def _lost(self) -> None:
        was_alive, self.alive = self.alive, False
        for sub in list(self._subs.values()):
            sub.frames.put(None)
        for ev in list(self._ctl.values()):
            ev.set()
        if was_alive and self._on_lost is not None:
            self._on_lost()

    def _receipt(self, rid: str, ok: bool, detail: str) -> None:
        ev = self._ctl.get(rid)
        if ev is not None:
            if not ok:
                self._ctl_ok[rid] = detail
            ev.set()
        elif self._hook is not None:
            self._hook(rid, ok, detail)

    def _live(self, what: str) -> Any:
        if not self.alive or self._conn is None:
            raise ConnectionLost(f"{what}: not connected to {self.where}")
        return self._conn

    def new_id(self, kind: str) -> str:
        return f"mqbed-{self._prefix}-{kind}-{next(self._ids)}"

    def send_many(self, frames: list[tuple[str, bytes, dict[str, str]]]) -> None:
        """SEND several frames with one socket write (a late generator's burst): the frames
        stomp.py would write one by one, encoded the same way (STOMP 1.2 header escaping,
        content-length), concatenated."""
        conn = self._live(f"send {len(frames)} frames")
        chunks = []
        for destination, body, headers in frames:
            h = {**headers, "destination": destination, "content-length": str(len(body))}
            conn._escape_headers(h)
            chunks.append(stomp_pack(stomp_convert(stomp_frame("SEND", h, body))))
        try:
            conn.transport.send(b"".join(chunks))
        except STOMP_ERRORS as e:
            raise ConnectionLost(f"send on {self.where}: {e!r}") from e

    def send(self, destination: str, body: bytes, headers: Mapping[str, str]) -> None:
        conn = self._live(f"send to {destination}")
        try:
            conn.send(destination, body, headers=dict(headers))
        except STOMP_ERRORS as e:
            raise ConnectionLost(f"send to {destination} on {self.where}: {e!r}") from e

    def _call_with_receipt(self, what: str, fn: Callable[[str], None], timeout: float) -> None:
        rid = self.new_id("ctl")
        ev = self._ctl[rid] = threading.Event()
        try:
            try:
                fn(rid)
            except STOMP_ERRORS as e:
                raise ConnectionLost(f"{what} on {self.where}: {e!r}") from e
            if not ev.wait(timeout) or not self.alive:
                raise ConnectionLost(f"{what} on {self.where}: no receipt within {timeout} s")
            if rid in self._ctl_ok:
                raise ConnectionLost(f"{what} on {self.where}: {self._ctl_ok.pop(rid)}")
        finally:
            self._ctl.pop(rid, None)

    def subscribe(
        self, destination: str, *, ack: str, headers: Mapping[str, str], timeout: float = 5.0
    ) -> Subscription:
        """SUBSCRIBE and wait for the broker's receipt, so the subscription is live on return."""
        conn = self._live(f"subscribe to {destination}")
        sub = Subscription(self.new_id("sub"), destination)
        self._subs[sub.id] = sub

        def do(rid: str) -> None:
            conn.subscribe(destination, id=sub.id, ack=ack, headers={**headers, "receipt": rid})

        try:
            self._call_with_receipt(f"subscribe to {destination}", do, timeout)
        except ConnectionLost:
            self._subs.pop(sub.id, None)
            raise
        return sub

    def unsubscribe(self, sub: Subscription, timeout: float = 5.0) -> None:
        """UNSUBSCRIBE (ActiveMQ requeues the subscription's unacked messages) and wait."""
        if self.alive and sub.id in self._subs:
            conn = self._conn
            try:
                self._call_with_receipt(
                    f"unsubscribe from {sub.destination}",
                    lambda rid: conn.unsubscribe(id=sub.id, headers={"receipt": rid}),
                    timeout,
                )
            finally:
                self._subs.pop(sub.id, None)
        self._subs.pop(sub.id, None)

    def ack(self, ack_id: str) -> None:
        conn = self._live(f"ack {ack_id}")
        try:
            conn.ack(ack_id)
        except STOMP_ERRORS as e:
            raise ConnectionLost(f"ack {ack_id} on {self.where}: {e!r}") from e

    def nack(self, ack_id: str) -> None:
        conn = self._live(f"nack {ack_id}")
        try:
            conn.nack(ack_id)
        except STOMP_ERRORS as e:
            raise ConnectionLost(f"nack {ack_id} on {self.where}: {e!r}") from e

    def abort(self) -> None:
        """Drop the socket without DISCONNECT (a dying process): the broker redelivers."""
        conn, self._conn = self._conn, None
        self.alive = False
        if conn is not None:
            with contextlib.suppress(*STOMP_ERRORS, OSError):
                conn.transport.disconnect_socket()
        for sub in list(self._subs.values()):
            sub.frames.put(None)
        self._subs.clear()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        self.alive = False
        if conn is not None:
            self._stop(conn)
        for sub in list(self._subs.values()):
            sub.frames.put(None)
        self._subs.clear()
