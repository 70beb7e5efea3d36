"""Warm up a freshly started JVM broker before anything measures it.

A Java broker runs its message path interpreted until HotSpot's JIT compiler has seen it often
enough to compile it. Measured on ActiveMQ 5.17 (2026-11-27, the client-path calibration's
scenario run twice on one freshly started broker, median publish → handler start of its light
streams): 1.1-1.6 ms in the first 14 s (~1,800 messages), 0.5-0.6 ms in the same seconds of the
second run; the first run came within 20 % of the second only after ~8,000 messages. A run, or a
calibration, on a broker started moments before measured a machine a long-lived broker never
is: every ActiveMQ profile calibrated that way carried tables twice too slow at low rates
(the quickstart on ActiveMQ was predicted a median 1.47 ms where 0.85 ms was measured).
RabbitMQ's Erlang code is compiled when it is loaded: the same two runs on it agree from the
first second, and its kind sends nothing (``KindFacts.warm_up``).

So every backend that starts a broker of such a kind sends it ``warm_up`` messages through a
scratch queue over the protocol the runs use (STOMP), a mix of what runs send (transient and
persistent, with and without receipts, small and large, acknowledged one by one), before it
reports the broker ready — bounded by ``seconds``. A broker restarted by a fault inside a run is
not warmed: that cold start is part of what the run measures.

Hand-written on stomp.py rather than through `testbed.brokers`' adapter because the backends sit
below the adapters (the layer contract in pyproject.toml): this is one connection, one
subscription and a counting listener.
"""

from __future__ import annotations

__all__ = ["WARM_QUEUE", "WarmUp", "warm_up"]

import threading
import time
from dataclasses import dataclass

import stomp

from testbed.backends.base import BrokerEndpoint
from testbed.core.broker_kinds import facts
from testbed.exceptions import BackendError

WARM_QUEUE = "mqbed-warm-up"
"""The scratch queue (left empty behind: STOMP cannot delete a queue)."""
SECONDS = 60.0
"""Upper bound of one warm-up (s); a slower broker is reported ready less warm, not failed."""
CONNECT_TIMEOUT = 10.0
"""Seconds to wait for the broker's CONNECTED frame."""
_WINDOW = 500
"""Messages sent ahead of those received (the broker's prefetch to the warm-up consumer)."""
_SIZES = (200, 16_000, 1_000)


@dataclass(frozen=True)
class WarmUp:
    """What one warm-up did."""

    sent: int
    received: int
    seconds: float


class _Counter(stomp.ConnectionListener):  # type: ignore[misc]
    """Acknowledges each message as it arrives and counts them."""

    def __init__(self) -> None:
        self.received = 0
        self.connected = False
        self.error = ""
        self.changed = threading.Condition()
        self.conn: stomp.Connection12 | None = None

    def on_message(self, frame: stomp.utils.Frame) -> None:
        assert self.conn is not None
        self.conn.ack(frame.headers["ack"])
        with self.changed:
            self.received += 1
            self.changed.notify_all()

    def wait(self, sent: int, window: int, deadline: float) -> None:
        """Until fewer than ``window`` of the ``sent`` messages are still to come (an error, or
        the ``deadline`` on the monotonic clock, ends it too)."""
        with self.changed:
            self.changed.wait_for(
                lambda: sent - self.received < window or bool(self.error),
                timeout=max(0.0, deadline - time.monotonic()),
            )

    def on_connected(self, frame: stomp.utils.Frame) -> None:
        with self.changed:
            self.connected = True
            self.changed.notify_all()

    def wait_connected(self, timeout: float) -> bool:
        """Whether the CONNECTED frame came within ``timeout`` s (an ERROR frame ends it)."""
        with self.changed:
            self.changed.wait_for(lambda: self.connected or bool(self.error), timeout=timeout)
            return self.connected and not self.error

    def on_error(self, frame: stomp.utils.Frame) -> None:
        with self.changed:
            self.error = frame.headers.get("message", "ERROR frame")
            self.changed.notify_all()


def warm_up(
    endpoint: BrokerEndpoint, messages: int | None = None, seconds: float = SECONDS
) -> WarmUp:
    """Send ``messages`` (default: the kind's ``warm_up``) through ``WARM_QUEUE`` and receive
    them; returns at once for a kind that needs none. Raises `BackendError` if the broker
    refuses the connection or answers an ERROR frame."""
    n = facts(endpoint.kind).warm_up if messages is None else messages
    started = time.monotonic()
    if n <= 0:
        return WarmUp(0, 0, 0.0)
    if endpoint.kind != "activemq":
        raise BackendError(f"warm-up: no STOMP path to a {endpoint.kind} broker")
    counter = _Counter()
    conn = stomp.Connection12(
        [(endpoint.host, endpoint.port)], heartbeats=(0, 0), reconnect_attempts_max=1, timeout=5
    )
    counter.conn = conn
    conn.set_listener("warm-up", counter)
    try:  # stomp.py's own wait=True has no time limit: a paused broker would hang it
        conn.connect(endpoint.username, endpoint.password, wait=False)
    except stomp.exception.StompException as exc:
        raise BackendError(f"warm-up of {endpoint.name}: connect failed: {exc!r}") from exc
    if not counter.wait_connected(CONNECT_TIMEOUT):
        conn.transport.disconnect_socket()
        why = counter.error or f"no CONNECTED frame within {CONNECT_TIMEOUT:g} s"
        raise BackendError(f"warm-up of {endpoint.name}: connect failed: {why}")
    dest = f"/queue/{WARM_QUEUE}"
    deadline = started + seconds
    sent = 0
    try:
        conn.subscribe(
            dest, id="warm", ack="client-individual",
            headers={"activemq.prefetchSize": str(_WINDOW)},
        )  # fmt: skip
        while sent < n and time.monotonic() < deadline and not counter.error:
            counter.wait(sent, _WINDOW, deadline)  # at most _WINDOW in flight
            headers = {"persistent": "true" if sent % 3 == 0 else "false"}
            if sent % 5 == 0:
                headers["receipt"] = f"warm-{sent}"
            conn.send(dest, b"x" * _SIZES[sent % len(_SIZES)], headers=headers)
            sent += 1
        counter.wait(sent, 1, deadline)  # all of them
        if counter.error:
            raise BackendError(f"warm-up of {endpoint.name}: the broker answered {counter.error}")
    finally:
        try:
            conn.unsubscribe("warm")
            conn.disconnect()
        except stomp.exception.StompException:
            conn.transport.disconnect_socket()
    return WarmUp(sent, counter.received, round(time.monotonic() - started, 2))
