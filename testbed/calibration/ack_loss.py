"""Acks a broker kill forgets: the profile's ``restart_time.ack_loss_s`` (docs/models.md §6).

A broker that makes consumers' acks of persistent messages durable lazily forgets the last of
them when it is killed: those messages come back after the restart and the ledger counts them
as duplicates. How many is a property of the broker and its store, not of the scenario, so it
is measured where the restart time is (`testbed.calibration.restart`), on the same kill: a
producer sends persistent messages at `RATE` msg/s to a durable queue with publisher confirms
(as a PCM producer does), and a consumer of the scenario's client library serves each for
`HOLD_S` and acks it, as a run's consumer does. The load runs *through* the kill, in a thread
of its own, so that the kill meets the broker in the middle of its work as a run's does (a
load stopped first leaves it a quiet moment to sync its acks).
After the restart the queue is drained, and the acked messages that come back are the
forgotten acks; their number over the ack rate is the window of acks a kill forgets (s). The
publishes that were never confirmed and are not in the queue after the restart went into the
dying broker; their number over the publish rate is how long after the signal clients still
talk to it (``restart_time.kill_s``). Acks
sent while the process was dying are lost with its sockets too, which the simulator models
as the kill's teardown (``restart_time.kill_s``, `emulator.sim.faults`); the load stops
acking when the kill returns, so only those it sent while the kill was under way count here.

Hand-written because no library measures a broker's ack durability; it uses the broker adapters
of the live workload, so the figure holds for the client library the runs use.
"""

from __future__ import annotations

__all__ = ["LOAD_S", "RATE", "AckLoad", "KillLosses"]

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import Consumer, Destination, QueueDecl, make_adapter
from testbed.workload.topology import purge

LOAD_S = 2.0
"""Seconds of acked load before the kill."""
HOLD_S = 0.004
"""Each message is served this long before its ack, one at a time (the PCM scenario's service
time): acked at once, a message can be gone before the broker writes it — ActiveMQ then never
stores it — so a kill has no ack of it to forget (two kills forgot none on ActiveMQ while the
PCM runs counted up to two per kill)."""
PREFETCH = 20
"""The consumer's prefetch (the PCM scenario's)."""
END_S = 3.0
"""The load thread ends at most this long after the kill was due (its connection is gone)."""
RATE = 100.0
"""msg/s of that load: the rate of the broker-kill scenario of the library."""
DRAIN_QUIET_S = 1.0
"""After the restart, the queue is drained until nothing has come for this long."""
DRAIN_TIMEOUT_S = 15.0
"""Longest the drain after the restart may take (s)."""
BODY = b"a" * 1024
QUEUE = "mqbed-cal-ack-loss"
"""The load's durable queue (emptied before each load; left empty after it)."""


@dataclass(frozen=True)
class KillLosses:
    """What one kill under the load lost."""

    forgotten: int
    """Messages acked before the kill ended that came back after the restart."""
    ack_rate: float
    """Acks per second in the second before the kill."""
    lost_in_flight: int
    """Publishes never confirmed, never consumed and not in the queue after the restart."""
    send_rate: float
    """Publishes per second in the second before the kill."""


def _per_second_before(times: Iterable[float], t: float) -> float:
    """How many of `times` fall in the second before `t`."""
    return float(sum(1 for x in times if t - 1.0 <= x < t))


class AckLoad:
    """An acked persistent load on a durable queue of its own, running until a kill."""

    def __init__(self, endpoint: BrokerEndpoint, client: str) -> None:
        self.client, self.queue = client, QUEUE
        self.acked: dict[str, float] = {}
        self.sent: dict[str, float] = {}  # msg id -> publish time
        self.confirmed: set[str] = set()
        self.back: set[str] = set()  # what the drain after the restart found
        self.adapter: Any = make_adapter(endpoint, client)
        self.adapter.connect()
        self.adapter.declare([QueueDecl(self.queue, durable=True)])
        purge(self.adapter, [self.queue], timeout=10.0)  # what an interrupted one left
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, rate: float = RATE, limit_s: float = LOAD_S + END_S) -> None:
        """Publish and ack in a thread of its own until the connection breaks, `stop`, or
        `limit_s` seconds."""
        self._thread = threading.Thread(
            target=self._run, args=(rate, limit_s), name="mqbed-ack-load", daemon=True
        )
        self._thread.start()

    def halt(self) -> None:
        """Tell the load to end (it does so at its next send or ack)."""
        self._stop.set()

    def stop(self, timeout: float = END_S) -> None:
        """End the load and wait ≤ `timeout` s for its thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, rate: float, limit_s: float) -> None:
        try:
            self._loop(rate, limit_s)
        except Exception:  # the kill breaks the connection: that ends the load
            return

    def _loop(self, rate: float, limit_s: float) -> None:
        producer = self.adapter.producer(
            Destination.queue(self.queue), persistent=True, confirms=True
        )
        consumer: Consumer = self.adapter.consumer(self.queue, prefetch=PREFETCH, ack_mode="manual")
        held: deque[tuple[float, Any]] = deque()  # (ack due, delivery): served one at a time
        start = time.monotonic()
        n = 0
        while not self._stop.is_set() and (due := start + n / rate) < start + limit_s:
            producer.publish(BODY, msg_id=f"a{n}")
            self.sent[f"a{n}"] = time.monotonic()
            n += 1
            while (wait := due + 1 / rate - time.monotonic()) > 0 and not self._stop.is_set():
                if held:
                    wait = max(0.0, min(wait, held[0][0] - time.monotonic()))
                for d in consumer.drain(timeout=wait):
                    free = held[-1][0] if held else 0.0
                    held.append((max(time.monotonic(), free) + HOLD_S, d))
                self._ack_due(held)
                self.confirmed.update(c.msg_id for c in producer.poll_confirms(0.0) if c.ok)

    def _ack_due(self, held: deque[tuple[float, Any]]) -> None:
        while held and held[0][0] <= time.monotonic():
            if self._stop.is_set():
                return  # killed: an ack now would only be the teardown's
            d = held.popleft()[1]
            d.ack()
            self.acked[d.msg_id] = time.monotonic()

    def abort(self) -> None:
        """Drop the connection (the broker was killed under it)."""
        self.adapter.abort()

    def losses(self, endpoint: BrokerEndpoint, t_kill: float, t_killed: float) -> KillLosses:
        """After the restart (the kill began at monotonic `t_kill` and ended at `t_killed`):
        drain the queue, then count what the kill lost."""
        self._drain(endpoint)
        forgotten = len(self.back & {m for m, t in self.acked.items() if t < t_killed})
        gone = set(self.sent) - self.confirmed - set(self.acked) - self.back
        void = sum(1 for m in gone if self.sent[m] >= t_kill - 1.0)
        return KillLosses(
            forgotten=forgotten,
            ack_rate=_per_second_before(self.acked.values(), t_kill),
            lost_in_flight=void,
            send_rate=_per_second_before(self.sent.values(), t_kill),
        )

    def _drain(self, endpoint: BrokerEndpoint) -> None:
        """Consume (and ack) what the queue holds after the restart into `back`."""
        adapter: Any = make_adapter(endpoint, self.client)
        adapter.connect()
        try:
            consumer = adapter.consumer(self.queue, prefetch=100, ack_mode="manual")
            t0 = last = time.monotonic()
            while time.monotonic() - last < DRAIN_QUIET_S:
                if time.monotonic() - t0 > DRAIN_TIMEOUT_S:
                    break
                got = consumer.drain(timeout=0.2)
                for d in got:
                    d.ack()
                    self.back.add(d.msg_id)
                if got:
                    last = time.monotonic()
            consumer.close()
        finally:
            adapter.close()
