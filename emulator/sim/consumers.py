"""Consumer instances (docs/models.md §3 consumers, §4, §1 chains).

A consumer is one single-threaded client: deliveries reach it ``d`` (+ the amqp delivery
residual δ(size), + the prefetch-1 overhead) after dispatch, wait in its local buffer, and are
handled one at a time for ``service_time`` + the client's read overhead. Everything about one
delivery is decided when it is dispatched (its handler start ``t_deliver``, end ``t_done`` and
whether it fails), and one or two callbacks fire when the broker or the record must learn of it:

- ``ack: after_processing`` — the ack reaches the broker at ``t_done + d``: the copy is deleted,
  one credit returns, follow-ups are published. A failed attempt (probability
  ``failure_probability``) is decided when the handler starts and takes no service time (the
  live consumer drops it before serving). With a visibility timeout the consumer hands it back
  at once (its credit returns at ``start + d``) and the copy becomes visible again, at the
  tail, VT after the handler took it up — or is dead-lettered at once if that was attempt
  ``max_deliveries`` (outcome ``timed_out``/``dead_lettered``; live:
  testbed/control/visibility.py). Without one it is nacked and requeued at once (``nacked``).
  In-order queues keep a failed copy leased (unacked) until VT after the handler took it up,
  so that no newer message overtakes it; it is then ``timed_out`` and requeued at the head
  (``testbed.core.visibility.holds_head_of_line``; live: one active consumer, prefetch 1).
- ``ack: after_receive`` — the ack is sent when the handler starts; a failure loses the message.
- ``ack: auto`` — deleted at dispatch, no credit limit; a failure loses the message.
- A lease that expires before the ack arrives (a slow consumer) is ``timed_out``: the copy is
  redelivered and the late ack ignored; its follow-ups are still published.
Follow-ups (message-driven chains): on success, each ``follow_ups`` entry whose ``on`` matches
the message's type publishes, with its probability, a new message from this consumer at
``t_done`` (the next one a publish's CPU later, and all leave when the last is sent: see
``_publish_follow_ups``); it reaches the broker at ``t_done + d``.

The consumer's Locust process (``cpu``, ``emulator.sim.client_cpu``) is shared with the other
users of that process: each delivery books the CPU of one client operation on it as it arrives,
so a delivery that arrives while the process works for another user is ready later (five idle
consumers of one process given one fanned-out message start one after another). A consumer
still busy with an earlier message receives the next one meanwhile: the wait is hidden.

Hooks for faults and autoscaling (§6–§8): ``epoch`` invalidates the pending callbacks of a
crashed consumer; ``voided`` names the (message, attempt) pairs whose pending ``auto`` /
``after_receive`` completion died with it (no record, no follow-ups); ``stop()`` detaches it
gracefully (it finishes and acks what it holds). With a ``link`` (``emulator.sim.links``), a
delivery passes ``link.deliver`` (its transit) before it is served and ``link.delivered``
after, every ack or nack it schedules (``_acked``, ``_early_ack``, ``_nacked``, ``_failed``)
passes ``link.ack``, and every settled attempt ``link.record`` (``record``).
"""

from __future__ import annotations

__all__ = ["Consumer", "FollowUp", "ACK_MODES"]

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from emulator.sim.recorder import OUTCOME_CODES
from testbed.core.visibility import dead_letters

if TYPE_CHECKING:
    from emulator.sim.broker import Broker
    from emulator.sim.client_cpu import ClientCpu
    from emulator.sim.links import Links
    from emulator.sim.queues import Queue
    from emulator.sim.recorder import Recorder

ACK_MODES = {"auto": 0, "after_receive": 1, "after_processing": 2}
_AUTO, _RECEIVE, _PROCESSING = 0, 1, 2
_ACKED = OUTCOME_CODES["acked"]
_DROPPED = OUTCOME_CODES["dropped"]
_TIMED_OUT = OUTCOME_CODES["timed_out"]
_DEAD = OUTCOME_CODES["dead_lettered"]
_NACKED = OUTCOME_CODES["nacked"]
UNLIMITED = 1 << 60


@dataclass
class FollowUp:
    """One chain link, resolved: names as recorder indices, destinations as queues."""

    on: int  # flow index the consumed message must carry, -1 = any
    probability: float
    flow: int
    dest: int
    queues: tuple[Queue, ...]
    size: Callable[[], float]
    persistent: bool


class Consumer:
    """One consumer instance on one queue."""

    def __init__(
        self,
        name: str,
        idx: int,
        broker: Broker,
        rec: Recorder,
        *,
        ack: str,
        prefetch: int,
        service: Callable[[], float],
        read: Callable[[], float],
        failure_probability: float,
        uniform: Callable[[int, int], float],
        follow_ups: list[FollowUp],
        follow_uniform: Callable[[], float],
        extra_a: float = 0.0,
        extra_b: float = 0.0,
    ) -> None:
        self.name = name
        self.idx = idx
        self.broker = broker
        self.rec = rec
        self.ack = ACK_MODES[ack]
        self.prefetch = prefetch
        self.credit = UNLIMITED if (prefetch == 0 or ack == "auto") else prefetch
        self.service = service
        self.read = read
        self.fail_p = failure_probability
        self.u = uniform
        self.follow_ups = follow_ups
        self.u_follow = follow_uniform
        self.extra_a = extra_a  # prefetch-1 overhead on the delivery path
        self.extra_b = extra_b
        self.free = 0.0  # the handler is busy until then
        self.epoch = 0
        self.voided: set[tuple[int, int]] = set()  # (message, attempt) lost with a connection
        self.active = False
        self.queue: Queue | None = None
        self.channel_free = 0.0  # for fan-out follow-ups (its publishing channel)
        self.together = False  # a burst of follow-ups leaves after its last send (`KindFacts`)
        self.d = broker.d
        self.call_at = broker.call_at
        self.sizes = broker.sizes
        self.flows = rec.m_flow
        self._record = rec.delivery
        self.link: Links | None = None  # fault hooks (emulator.sim.links), set by the model
        self.cpu: ClientCpu | None = None  # its Locust process's CPU, set by the model

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, q: Queue) -> None:
        self.queue = q
        self.active = True
        q.attach(self)

    def stop(self) -> None:
        """Graceful scale-down (§8): take nothing new; held copies are finished and acked."""
        self.active = False
        if self.queue is not None:
            self.queue.detach(self)

    # -- one delivery -----------------------------------------------------------------------

    def deliver(self, q: Queue, m: int, attempt: int, t_disp: float) -> None:
        """Copy ``m`` of queue ``q`` is dispatched to this consumer at ``t_disp`` (moved by
        ``link.deliver``; ``link.delivered`` sees it once it is served)."""
        link = self.link
        if link is None:
            self._serve(q, m, attempt, t_disp, None)
            return
        if link.deliver is not None:
            t_disp = link.deliver(self, q, m, attempt, t_disp)
        free0 = self.free
        self._serve(q, m, attempt, t_disp, link.ack)
        if link.delivered is not None:
            link.delivered(self, q, m, attempt, t_disp, free0)

    def _serve(
        self, q: Queue, m: int, attempt: int, t_disp: float, ack: Callable[..., float] | None
    ) -> None:
        """Decide everything about the delivery and schedule its callbacks (acks and nacks at
        the time ``ack``, the link's hook, gives)."""
        size = self.sizes[m]
        d = self.d
        t = t_disp + d + q.deliver_a + self.extra_a + (q.deliver_b + self.extra_b) * size
        b = q.broker
        # a fanned-out copy shares its siblings' draw, a message published after idle time
        # its wake-up delay (Broker.shared_draw)
        e = b.shared_draw(m) if attempt == 1 and b.coupled else None
        if q.waited and q.turn is not None:  # after a wait only the way back is ahead
            t += q.turn() - self.extra_a - self.extra_b * size  # measured with prefetch 1
        elif q.jitter is not None:
            at = q.at
            r = q.jitter() if e is None or e[0] < 0.0 or at is None else at(e[0])
            scale = q.idle_scale
            t += r if scale is None else r * scale(t_disp - self.free)
            if e is not None:
                t += e[2]
            if t < t_disp + d:
                t = t_disp + d
        cpu = self.cpu
        if cpu is not None:  # its receive work, booked on its process as its frames arrive
            t = cpu.done_by(t, cpu.receive)
        start = t if t > self.free else self.free
        ok = not (self.fail_p and self.u(m, attempt) < self.fail_p)
        served = start + (self.service() if ok else 0.0)
        if cpu is not None and cpu.ack:  # ack and record: in its hold, in the others' way
            cpu.take(served, cpu.ack)
        done = served + self.read()
        self.free = done
        if b.wake is not None:  # the machine is awake then (its start follows a publish or
            b.wake.active(done)  # an earlier end within a client path: emulator.sim.wake)
        mode = self.ack
        call_at = self.call_at
        if not ok and mode == _PROCESSING and not q.in_order:
            vt = q.vt
            t = done + d if ack is None else ack(self, done + d)
            if vt is not None:
                call_at(t, self._failed, (q, m, attempt, start, start + vt, self.epoch))
            else:
                call_at(t, self._nacked, (q, m, attempt, start, done, self.epoch))
            return
        if mode == _AUTO:
            q.remove(m, acked=False)
            call_at(
                done + d, self._finish, (q, m, attempt, start, done, _ACKED if ok else _DROPPED)
            )
            return
        if mode == _RECEIVE:
            ack_at: float | None = start + d
        else:
            ack_at = done + d if ok else None
        vt = q.vt
        if vt is not None and (ack_at is None or ack_at > t_disp + vt):
            if not ok and mode == _PROCESSING:  # in order: held at the head, leased from start
                done = start + vt
                call_at(done, self._expire, (q, m, attempt, start, done, _TIMED_OUT, self.epoch))
                return
            out = _TIMED_OUT if ok else _DROPPED
            call_at(t_disp + vt, self._expire, (q, m, attempt, start, done, out, self.epoch))
            if ok and self.follow_ups:
                call_at(done + d, self._late_follow_ups, (m, done))
            return
        if ack_at is None:  # failed, no visibility timeout: unacked until the channel closes
            call_at(done, self._held, (q, m, attempt, start, done))
        else:
            if ack is not None:
                ack_at = ack(self, ack_at)
            if mode == _PROCESSING:
                call_at(ack_at, self._acked, (q, m, attempt, start, done, self.epoch))
                return
            call_at(ack_at, self._early_ack, (q, m, self.epoch))
            call_at(
                done + d, self._finish, (q, m, attempt, start, done, _ACKED if ok else _DROPPED)
            )

    # -- callbacks --------------------------------------------------------------------------

    def record(
        self, m: int, queue: int, consumer: int, attempt: int, t_del: float, t_done: float, out: int
    ) -> None:
        """Settle one attempt: ``link.record`` sees it, then the recorder writes its row."""
        link = self.link
        if link is not None and link.record is not None:
            link.record(self, m, attempt, out)
        self._record(m, queue, consumer, attempt, t_del, t_done, out)

    def _acked(self, ev: Any) -> None:
        q, m, attempt, start, done, epoch = ev.value
        if epoch != self.epoch:
            return
        self.record(m, q.idx, self.idx, attempt, start, done, _ACKED)
        q.remove(m)
        self.broker.pending -= 1
        self._credit(q)
        if self.follow_ups:
            self._publish_follow_ups(m, done)

    def _early_ack(self, ev: Any) -> None:
        q, m, epoch = ev.value
        if epoch != self.epoch:
            return
        q.remove(m)
        self._credit(q)

    def _finish(self, ev: Any) -> None:
        q, m, attempt, start, done, out = ev.value
        voided = self.voided
        if voided and (m, attempt) in voided:  # lost with a dropped connection (§6)
            voided.discard((m, attempt))
            self.broker.pending -= 1
            return
        self.record(m, q.idx, self.idx, attempt, start, done, out)
        self.broker.pending -= 1
        if out == _ACKED and self.follow_ups:
            self._publish_follow_ups(m, done)

    def _held(self, ev: Any) -> None:
        q, m, attempt, start, done = ev.value
        self.record(m, q.idx, self.idx, attempt, start, done, _DROPPED)

    def _failed(self, ev: Any) -> None:
        """A failed attempt handed back under a visibility timeout (credit returns now)."""
        q, m, attempt, start, visible_at, epoch = ev.value
        if epoch != self.epoch:
            return
        q.release(m)
        if dead_letters(attempt, q.max_deliveries):
            self.record(m, q.idx, self.idx, attempt, start, self.broker.env.now, _DEAD)
            self.broker.dead_letter(q, m)
        else:
            self.record(m, q.idx, self.idx, attempt, start, visible_at, _TIMED_OUT)
            self.call_at(visible_at, self._visible, (q, m, attempt))
        self._credit(q)

    def _visible(self, ev: Any) -> None:
        q, m, attempt = ev.value
        self.broker.requeue(q, m, attempt, tail=True)

    def _nacked(self, ev: Any) -> None:
        """A failed attempt without visibility timeout: nack(requeue) puts it back at once."""
        q, m, attempt, start, done, epoch = ev.value
        if epoch != self.epoch:
            return
        q.release(m)
        self.record(m, q.idx, self.idx, attempt, start, done, _NACKED)
        self.broker.requeue(q, m, attempt)
        self._credit(q)

    def _expire(self, ev: Any) -> None:
        q, m, attempt, start, done, out, epoch = ev.value
        if epoch != self.epoch:
            return
        q.release(m)
        if dead_letters(attempt, q.max_deliveries):
            self.record(m, q.idx, self.idx, attempt, start, done, _DEAD)
            self.broker.dead_letter(q, m)
        else:
            self.record(m, q.idx, self.idx, attempt, start, done, out)
            self.broker.requeue(q, m, attempt)
        self._credit(q)

    def _late_follow_ups(self, ev: Any) -> None:
        m, done = ev.value
        self._publish_follow_ups(m, done)

    def _credit(self, q: Queue) -> None:
        self.credit += 1
        if self.credit == 1 and self.active:
            q.avail.append(self)
        q.pump()

    # -- chains -----------------------------------------------------------------------------

    def _publish_follow_ups(self, m: int, t: float) -> None:
        """Publish the handler's follow-ups of ``m`` (ended at ``t``), one after another.

        The live handler sends them in a row, ``cpu.follow_gap`` apart (the calibration's burst
        stream; without it the publish CPU ``cpu.publish``), and holds its Locust process meanwhile:
        the burst is booked on it, so deliveries to its other consumers wait for the last
        send. On ActiveMQ none is on its way before the last is sent (``together``, the kind's
        ``follow_ups_together``); on RabbitMQ each leaves at its own stamp. The calibration's
        follow-up table is measured with one follow-up per handler, so one is unchanged."""
        flow = self.flows[m]
        out: list[tuple[int, FollowUp]] = []
        cpu = self.cpu
        gap = cpu.follow_gap if cpu is not None else 0.0
        new = self.rec.new_message
        for f in self.follow_ups:
            if f.on >= 0 and f.on != flow:
                continue
            if f.probability < 1.0 and self.u_follow() >= f.probability:
                continue
            stamp = t + gap * len(out)
            m2 = new(f.flow, f.dest, self.idx, f.size(), stamp, stamp)
            self.rec.confirm(m2, stamp)  # the live consumer records a follow-up as confirmed
            self.broker.pending += 1
            out.append((m2, f))
        if len(out) < 2 or gap <= 0.0:
            self._send_now(out)
            return
        if cpu is not None:
            cpu.take(t, gap * len(out))  # the handler does not yield until the last is sent
        now = self.broker.env.now
        if self.together:
            self.call_at(max(now, t + gap * (len(out) - 1)), self._send, out)
            return
        for k, sent in enumerate(out):
            self.call_at(max(now, t + gap * k), self._send, [sent])

    def _send(self, ev: Any) -> None:
        self._send_now(ev.value)

    def _send_now(self, out: list[tuple[int, FollowUp]]) -> None:
        accept = self.broker.accept
        for m2, f in out:
            accept(self, m2, f.queues, 0, f.persistent)

    def on_confirm(self, ev: Any) -> None:  # follow-ups do not ask for confirms
        return
