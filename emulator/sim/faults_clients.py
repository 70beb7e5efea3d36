"""Client-side faults in the simulation: dropped connections, crashes, reconnects (see
``emulator.sim.faults``, whose ``FaultSim`` mixes this in).

A consumer whose connection drops (broker kill, its own crash, a reset link) loses the epoch of
its pending callbacks; the delivery in hand is recorded ``crashed`` and every unacked copy goes
back to the broker (requeued at once, or kept/dropped by a broker kill). Copies the broker had
already counted as delivered (``ack: auto`` at dispatch, ``after_receive`` once the handler
started) are lost with the client: the one in hand and, under ``auto``, the whole buffer — all
the broker pushed, since neither RabbitMQ (no-ack consumers) nor ActiveMQ (STOMP ``ack:auto``
acks on dispatch) holds an auto-ack consumer to its prefetch. A producer cut off
misses the sends due until it reconnects (rows without publish time); one waiting for a confirm
leaves that publish unconfirmed.
"""

from __future__ import annotations

__all__ = ["ClientFaults"]

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from emulator.sim.consumers import _AUTO, _RECEIVE, UNLIMITED, Consumer
from emulator.sim.producers import Producer
from emulator.sim.recorder import OUTCOME_CODES
from testbed.core.client_events import (
    client_down,
    client_up,
    crash_ended,
    crash_skipped,
    crash_started,
    on,
)
from testbed.core.reconnect import FIRST_RETRY, next_attempt
from testbed.core.scenario_faults import ClientFault

if TYPE_CHECKING:
    from emulator.sim.broker import Broker
    from emulator.sim.kernel import Kernel
    from emulator.sim.model import Model
    from emulator.sim.queues import Queue
    from emulator.sim.recorder import Recorder

_CRASHED = OUTCOME_CODES["crashed"]
_ACKED = OUTCOME_CODES["acked"]


class ClientFaults:
    """Connection drops of consumer and producer instances (state lives in ``FaultSim``)."""

    model: Model
    b: Broker
    kernel: Kernel
    rec: Recorder
    killed: bool
    up_at: float
    inflight: dict[Consumer, dict[int, tuple[Queue, int, float, float, float]]]
    paused: bool
    paused_consumers: list[Consumer]
    awaiting: dict[Producer, set[int]]
    down_until: dict[Producer, float]
    dead: set[Producer]
    unaware: dict[Producer, float]
    reconnecting: dict[Consumer, float]
    """Consumers between a lost connection and their reconnect, by the time they lost it (a
    pending ``_reconnect`` of another time is stale: a crash ended that chain)."""
    restarting: set[Producer]
    """Producers down by a crash until their restart has connected (not a crash target, as
    live: the instance is not running)."""

    def event(self, kind: str, target: str, detail: dict[str, Any]) -> None:
        raise NotImplementedError

    def _drop(self, q: Queue, m: int) -> None:
        raise NotImplementedError

    def _disconnect(self, c: Consumer, now: float) -> list[tuple[Queue, int, int]]:
        """Drop ``c``'s connection at ``now``: returns the copies the broker gets back
        (queue, message, attempts so far); records the delivery in hand as ``crashed``."""
        c.epoch += 1
        c.active = False
        if c.queue is not None:
            c.queue.detach(c)
            if c.queue.transient and not c.queue.consumers:
                self._vanish(c.queue)
        if c in self.paused_consumers:
            self.paused_consumers.remove(c)
        back: list[tuple[Queue, int, int]] = []
        held = self.inflight[c]
        b = self.b
        mode = c.ack
        for m, (q, attempt, start, done, _) in sorted(held.items()):
            if mode == _AUTO or (mode == _RECEIVE and start < now):
                self._lose_acknowledged(c, q, m, attempt, start, done, now)
                continue
            if mode == _RECEIVE:  # not started, so not acked yet: the broker gets it back
                c.voided.add((m, attempt))
                b.pending += 1  # its _finish still counts it done
            elif done <= now:  # served, its ack on the way: it counts
                c.record(m, q.idx, c.idx, attempt, start, done, _ACKED)
                q.remove(m)
                b.pending -= 1
                continue
            elif start < now:
                c.record(m, q.idx, c.idx, attempt, start, now, _CRASHED)
            q.release(m)
            back.append((q, m, attempt))
        held.clear()
        c.credit = UNLIMITED if (c.prefetch == 0 or mode == _AUTO) else c.prefetch
        c.free = now
        return back

    def _lose_acknowledged(
        self, c: Consumer, q: Queue, m: int, attempt: int, start: float, done: float, now: float
    ) -> None:
        """A copy the broker counted as delivered before ``c``'s connection dropped at ``now``
        (``auto``: when it was sent; ``after_receive``: when its handler started), as the live
        ``ConsumerLoop._crash`` leaves it: served by ``now``, it is recorded as it finishes; in
        the handler, it is recorded ``crashed`` now; still in the client's buffer or on the
        wire, it gets no row. The last two are lost (never redelivered, no follow-ups)."""
        if c.ack == _RECEIVE and start + c.d > now:
            q.remove(m)  # the ack was on its way
        if done <= now:
            return
        if start < now:
            c.record(m, q.idx, c.idx, attempt, start, now, _CRASHED)
        c.voided.add((m, attempt))

    def _vanish(self, q: Queue) -> None:
        """A transient queue's last consumer is gone, and the queue with it (docs/models.md
        §6): its ready copies are dropped (lost: they were enqueued) until a consumer
        declares it again."""
        for _, m in q.ready:
            q.attempts.pop(m, None)
            self._drop(q, m)
        q.ready.clear()

    def give_back(self, back: list[tuple[Queue, int, int]]) -> None:
        """The broker requeues a dropped connection's unacked copies (in their order); a
        transient queue that went with the connection takes none back."""
        for q, m, attempt in reversed(back):
            if self.killed or (q.transient and not q.consumers):
                self._drop(q, m)
            else:
                self.b.requeue(q, m, attempt)

    def _reconnect_later(self, c: Consumer, now: float, up: float) -> None:
        """``c`` lost its connection at ``now``; the broker (or the link) takes it again from
        ``up``. Its backoff goes on through later outages: a client still retrying when the
        broker is killed again does not start over at 0.1 s (as the live one does not)."""
        self.event(*on(c.name, client_down("connection lost")))
        self.reconnecting[c] = now
        t, delay = next_attempt(now, FIRST_RETRY, up)
        self.kernel.call_at(t, self._reconnect, (c, now, delay))

    def _reconnect(self, ev: Any) -> None:
        c, since, delay = ev.value
        if self.reconnecting.get(c) != since:  # crashed meanwhile: its restart takes over
            return
        if c.active or c.queue is None:
            del self.reconnecting[c]
            return
        if self.killed:  # down again since the attempt was planned: this try fails
            t, delay = next_attempt(self.kernel.now, delay, self.up_at)
            self.kernel.call_at(t, self._reconnect, (c, since, delay))
            return
        c.free = max(c.free, self.kernel.now)
        if self.paused:
            c.queue.consumers.append(c)
            self.paused_consumers.append(c)
        else:
            c.start(c.queue)
        del self.reconnecting[c]
        self.event(*on(c.name, client_up(self.kernel.now - since)))

    @staticmethod
    def _writes_only(p: Producer) -> bool:
        """An open-loop producer that asks for no confirms never reads its connection."""
        return not p.notify and not p.closed

    def _send_into_closed(self, p: Producer, t_int: float, now: float) -> int:
        """The first publish of a writer after a killed broker's sockets closed: the write
        succeeds (a peer's close shows on a read; the first write after it succeeds, the next
        fails), the message is gone, and the client learns of the kill only now. Measured on
        the QoS PC experiment (transient messages, no confirms, three kills a replication,
        2026-11-29), on RabbitMQ and ActiveMQ alike: at every kill with the producer connected
        its ``client_down`` came 0.1-1.1 ms after a publish that was never delivered, 21-44 ms
        after the signal and 2-24 ms after the consumer had learned; where its next publish
        came later than that, it failed and the silently lost one was the one before.
        Learning at the close, the simulator lost one message a kill too few (1 a replication
        against 4 on ActiveMQ)."""
        up = self.unaware.pop(p)
        m = self.rec.new_message(p.flow, p.dest, p.idx, p.size(), t_int, now)
        p.sent += 1
        p.confirm_record(m, now)  # as the live client: the send returned
        self._cut_producer(p, now, up)
        return m

    def _cut_producer(self, p: Producer, now: float, up: float) -> None:
        """``p`` lost its connection at ``now``; the broker (or the link) takes it from ``up``."""
        t, delay = next_attempt(now, FIRST_RETRY, up)
        self._producer_down(p, t, delay=delay)

    def _producer_down(
        self, p: Producer, until: float, crash: str | None = None, delay: float = FIRST_RETRY
    ) -> None:
        """``p`` is cut off until ``until`` (its first connection attempt after the outage):
        by a lost connection (``client_down``/``client_up`` rows) or by its own crash
        (``crash``: the group's ``fault_end`` row on the restart). One already retrying keeps
        its backoff through a lost connection (the planned attempt finds out whether the broker
        is up); a crash ends the retrying, and the restart connects from ``until``."""
        now = self.kernel.now
        down = self.down_until.get(p, -1.0)
        if crash is None and down > now:  # already cut off
            return
        if crash is not None:  # it ends a reconnect in progress, as live
            self.restarting.add(p)
        self.down_until[p] = until
        waiting = self.awaiting.pop(p, set())  # they stay unconfirmed
        if p.closed:  # its loop waited for the one confirm: it goes on (sends missed till `until`)
            for m in waiting:
                p.call(0.0, p.confirmed, (m, 0))
        if until < math.inf:
            if crash is None:
                self.event(*on(p.name, client_down("connection lost")))
            self.kernel.call_at(until, self._producer_up, (p, now, crash, delay))

    def _producer_up(self, ev: Any) -> None:
        p, since, crash, delay = ev.value
        now = self.kernel.now
        if self.down_until.get(p) != now:  # superseded by a later, longer cut
            return
        if self.killed:  # the broker is down (again): this try fails, the backoff goes on
            t, delay = next_attempt(now, delay, self.up_at)
            self.down_until[p] = t
            self.kernel.call_at(t, self._producer_up, (p, since, crash, delay))
            return
        if crash is not None:
            self.restarting.discard(p)
            group = p.name.rsplit("-", 1)[0]
            self.event(*on(group, crash_ended(crash, p.name)))
            return
        self.event(*on(p.name, client_up(self.kernel.now - since)))

    def _instances(self, f: Any) -> list[Any]:
        pool: Iterable[Any] = (
            self.model.producers if f.kind == "producer_crash" else self.inflight.keys()
        )
        return [x for x in pool if x.name.rsplit("-", 1)[0] == f.target]

    def _crash(self, ev: Any) -> None:
        i, f, instance, restart_after = ev.value
        now = self.kernel.now
        kind = f.kind if isinstance(f, ClientFault) else "consumer_crash"
        pool: list[Any] = (
            self._instances(f) if isinstance(f, ClientFault) else self._instances_of(f.target)
        )
        if instance is not None:
            pool = [x for x in pool if x.name == f"{f.target}-{instance}"]
        victims: list[Any]
        if kind == "producer_crash":
            victims = [p for p in pool if not (p.done or p in self.dead or p in self.restarting)]
            victims = victims[: f.count]
        else:  # a consumer retrying its connection is a running process too: it crashes
            victims = [c for c in pool if c.active or c in self.reconnecting]
            victims = victims[: getattr(f, "count", 1)]
        if not victims:
            self.event(*on(f.target, crash_skipped(kind, "no live instance")))
            return
        self.event(*on(f.target, crash_started(kind, i, [v.name for v in victims], restart_after)))
        for v in victims:
            if kind == "producer_crash":
                if restart_after is None:
                    self.dead.add(v)
                    v.max = v.sent
                until = math.inf if restart_after is None else now + restart_after
                self.unaware.pop(v, None)  # its dead connection goes with it, unwritten
                self._producer_down(v, until, crash=kind)
                continue
            if self.reconnecting.pop(v, None) is None:  # else already disconnected
                self.give_back(self._disconnect(v, now))
            if restart_after is not None:
                t = now + restart_after
                self.kernel.call_at(t, self._restarted, (v, kind, f.target, FIRST_RETRY))

    def _instances_of(self, group: str) -> list[Consumer]:
        return [c for c in self.inflight if c.name.rsplit("-", 1)[0] == group]

    def _restarted(self, ev: Any) -> None:
        c, kind, group, delay = ev.value
        if self.killed:  # its first connect fails: it retries with the backoff
            t, delay = next_attempt(self.kernel.now, delay, self.up_at)
            self.kernel.call_at(t, self._restarted, (c, kind, group, delay))
            return
        if not c.active and c.queue is not None:
            c.free = max(c.free, self.kernel.now)
            c.start(c.queue)
        self.event(*on(group, crash_ended(kind, c.name)))
