"""The scenario's ``faults:`` timeline inside the simulation (docs/models.md §6, issue 6 point 4).

The same episodes as the live run: broker faults and stochastic broker failures come from
``testbed.core.faultplan.plan_faults``, client crashes and consumer-group stochastic crashes
from ``plan_crashes`` (the workload's per-instance streams), both with the live runner's seed
(``testbed.core.seeds.replication_seed``), so replication *r* of a prediction replays the
fault schedule of live replication *r*. Semantics,
mirroring the live side (``testbed/faults``, ``testbed/workload``):

- **broker_kill / broker_restart** (and stochastic ``kill``): the broker is down from ``at``
  until ``at + duration + restart_seconds(kind)`` (``testbed.core.availability``: a RabbitMQ
  start with persistent data takes ~5–8 s; the live ``fault_end``/``broker_up`` rows are
  written when it is healthy again). At the signal the broker stops (no routing, dispatch or
  confirm) and what was not on disk is gone; a kill's connections close only ``teardown_s``
  later (``kill_teardown_seconds``: the process exits after tearing down its memory), and
  until then producers publish into the void (publish time, never confirmed) and consumers
  serve what they hold, their acks lost (redelivered: duplicates). A graceful restart closes
  them at once. When they close, every
  connection drops: a consumer's delivery in hand is recorded ``crashed``; unacked and
  ready copies are kept only when the message is persistent *and* the queue durable *and* it
  was on disk — a confirmed one once the broker sent its confirm (``Broker.on_written``) — (they
  are redelivered after the restart, unacked ones as attempt n+1), others are lost;
  auto-acked copies a consumer held (the one in hand and its buffer) are lost with it, and
  after_receive ones whose handler had started (``ClientFaults._lose_acknowledged``);
  a publish waiting for its confirm stays unconfirmed. A kill
  also forgets acks of persistent copies that were not on disk yet (redelivered: duplicates),
  ``emulator.sim.ack_journal``: on RabbitMQ those after the last persistent write, elsewhere
  those of the last ``restart_time.ack_loss_s`` seconds before the signal (else the broker
  kind's figure, ``testbed.core.availability.ack_loss_seconds``).
  After the restart the broker is slow for a while: ``Broker.cold_start`` adds the profile's
  ``restart_time.cold`` (``extra · e^(−t/τ)``, measured) to publishes t s after it is up.
  Clients reconnect with the live bounded backoff (0.1 s doubling to 2 s); sends an open-loop
  producer had due before it reconnected are ``messages`` rows without publish time (sent,
  never confirmed).
- **broker_pause**: nothing the broker does happens (no routing, dispatch, confirm); publishes
  and acks that arrive meanwhile are handled at the resume; consumers go on serving what they
  hold.
- **memory_alarm / disk_alarm**: publishes are accepted but not read by the broker (publishers
  blocked, no confirms) until the alarm clears.
- **consumer_crash / producer_crash** (and stochastic consumer-group crashes): the instance
  drops its connection; the broker requeues its unacked copies at once (redelivered); what
  it had already acknowledged is lost (``ack: auto``: the delivery in hand and the whole
  buffer; ``after_receive``: the one in hand); with ``restart_after`` it comes back after
  that delay.
- network toxics: see ``emulator.sim.faults_net``.

How it reaches the model: ``FaultSim`` and its ``NetFaults`` are ``emulator.sim.links.Link``
hook objects, registered in that order on the model (``Model.add_link``); the producers, broker
and consumers call them where a message crosses a connection (see ``emulator.sim.links`` for
the points and how several links compose). ``FaultSim`` gates sends (``send``/``sent``),
arrivals at the broker (``accept``) and confirms (``confirm``, which asks the chain's
``confirm_delay`` for the toxics' transit time), and tracks each consumer's unacked copies
(``delivered``/``record``); ``NetFaults`` adds transit times (``upstream``, ``confirm_delay``,
``deliver``, ``ack``).

Events rows as the live run writes them: ``fault_start``/``fault_end`` (detail ``kind``,
``index``, ``episode``, ``scheduled``, ``params``), ``broker_down``/``broker_up``,
``client_down``/``client_up`` per instance. Modelled for the ``amqp`` broker model; with the
``threads``/``shared_lock`` models copies inside a broker stage at the kill are not dropped.
"""

from __future__ import annotations

__all__ = [
    "FaultSim",
    "install_faults",
]

from typing import TYPE_CHECKING, Any

from emulator.sim.ack_journal import AckJournal
from emulator.sim.consumers import _PROCESSING, Consumer
from emulator.sim.faults_clients import _ACKED, ClientFaults
from emulator.sim.faults_net import NetFaults
from emulator.sim.links import Link
from emulator.sim.producers import Producer
from testbed.core.availability import ack_loss_seconds, kill_teardown_seconds, restart_seconds
from testbed.core.broker_kinds import KINDS
from testbed.core.faultplan import episode_detail, plan_crashes, plan_faults

if TYPE_CHECKING:
    from emulator.sim.model import Model
    from emulator.sim.queues import Queue

NAN = float("nan")


class FaultSim(ClientFaults, Link):
    """Applies a scenario's fault timeline to one assembled ``Model`` (see module docstring)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        s = model.scenario
        self.b = model.broker
        self.kernel = model.kernel
        self.rec = model.rec
        self.restart_s = restart_seconds(s.broker.kind, model.costs.profile)
        facts = KINDS.get(s.broker.kind)
        self.journal = AckJournal(
            ack_loss_seconds(s.broker.kind, model.costs.profile),
            with_writes=facts is not None and facts.acks_with_writes,
        )
        self.teardown_s = kill_teardown_seconds(s.broker.kind, model.costs.profile)
        rt = model.costs.profile.restart_time if model.costs.profile is not None else None
        self.cold = rt.cold if rt is not None else None  # the slow first seconds after a start
        self.seed = model.rep_seed  # the live replication's (Model derives it once)
        self.stop = float(s.duration)
        self.persistent: set[int] = set()
        model.broker.on_written = self._written
        self.killed = False
        self.paused = False
        self.alarms = 0
        self.held: list[tuple[Any, ...]] = []  # publishes the broker has not read yet
        self.held_confirms: list[tuple[Producer, Any]] = []
        self.up_at = 0.0  # when the broker is up again after the current kill
        self.killed_at = 0.0  # when the current kill began
        self.inflight: dict[Consumer, dict[int, tuple[Queue, int, float, float, float]]] = {}
        self.paused_consumers: list[Consumer] = []
        self.awaiting: dict[Producer, set[int]] = {}  # publishes waiting for their confirm
        self.down_until: dict[Producer, float] = {}
        self.dead: set[Producer] = set()
        self.reconnecting: dict[Consumer, float] = {}
        self.restarting: set[Producer] = set()
        self.unaware: dict[Producer, float] = {}  # writers not yet aware of a kill: up time
        self.forget_acks = True  # a kill (not a graceful restart) forgets unsynced acks
        self.net = NetFaults(self)
        self.links = model.links
        for c in model.consumers:
            self.adopt(c)
        model.add_link(self)  # broker and client faults first, then the toxics on the wire
        model.add_link(self.net)
        self._schedule(s)

    # -- consumers --------------------------------------------------------------------------

    def adopt(self, c: Consumer) -> None:
        """Track a consumer's deliveries (call for consumers added later, e.g. by scaling)."""
        self.inflight[c] = {}

    def delivered(
        self, c: Consumer, q: Queue, m: int, attempt: int, t_disp: float, free0: float
    ) -> None:
        """Note the copy as unacked: (queue, attempt, handler start without δ's draw, done,
        dispatch time after the toxics)."""
        size = c.sizes[m]
        arrive = t_disp + c.d + q.deliver_a + c.extra_a + (q.deliver_b + c.extra_b) * size
        arrive = max(arrive, t_disp + c.d)  # δ's table draw is not known here: its floor
        self.inflight[c][m] = (q, attempt, max(arrive, free0), c.free, t_disp)

    def record(self, c: Consumer, m: int, attempt: int, out: int) -> None:
        """The copy is settled; an ack of a persistent copy may be forgotten by a kill."""
        entry = self.inflight[c].pop(m, None)
        if out == _ACKED and entry is not None and c.ack == _PROCESSING:
            q = entry[0]
            if q.durable and m in self.persistent:  # a kill may forget it (ack_journal)
                self.journal.acked(self.kernel.now, q, m, attempt, self.killed)

    # -- producers --------------------------------------------------------------------------

    def send(self, p: Producer, t_int: float, now: float) -> int | None:
        """A crashed producer sends nothing; one cut off records the send as missed."""
        if p in self.dead:
            if p.notify:
                p._finish()
            return -1
        if p in self.unaware:
            return self._send_into_closed(p, t_int, now)
        if now < self.down_until.get(p, -1.0):
            if p.closed:  # a closed loop retries after reconnecting, recording nothing
                if p.notify:
                    p.call_at(self.down_until[p], p.confirmed, (-1, 0))
                return -1
            m = self.rec.new_message(p.flow, p.dest, p.idx, p.size(), t_int, NAN)
            p.sent += 1
            return m
        return None

    def sent(self, p: Producer, m: int) -> None:
        if p.notify:
            self.awaiting.setdefault(p, set()).add(m)

    def confirm(self, p: Producer, value: tuple[int, int]) -> bool:
        """Void a confirm of a connection that is gone, hold it while the broker is paused,
        delay it by the toxics' transit (``confirm_delay`` of the chain)."""
        m, notify = value
        if notify == 0:
            return True
        waiting = self.awaiting.get(p)
        if waiting is None or m not in waiting:
            return False  # voided: the connection it was published on is gone
        if self.paused:
            self.held_confirms.append((p, value))
            return False
        delay = self.links.confirm_time(p)
        if delay > 0:
            p.call(delay, self._late_confirm, (p, value))
            return False
        waiting.discard(m)
        return True

    def _written(self, m: int, at: float) -> None:
        """A confirmed persistent message will be on disk (its confirm sent) at ``at``: a kill
        before then loses it, and on RabbitMQ the acks before it are on disk with it."""
        self.journal.written(m, at, self.kernel.now)

    def _late_confirm(self, ev: Any) -> None:
        p, value = ev.value
        waiting = self.awaiting.get(p)
        if waiting is not None and value[0] in waiting:
            waiting.discard(value[0])
            p.call(0.0, p.confirmed, value)

    # -- broker -----------------------------------------------------------------------------

    def accept(
        self, sender: Any, m: int, queues: tuple[Queue, ...], notify: int, persistent: bool
    ) -> bool:
        """Lose a publish in flight to a killed broker; hold one while paused or alarmed."""
        if persistent:
            self.persistent.add(m)
        if self.killed:
            self.b.pending -= 1  # lost in flight: the connection is gone
            return False
        if self.paused or self.alarms:
            self.held.append((sender, m, queues, notify, persistent))
            return False
        return True

    # -- schedule ---------------------------------------------------------------------------

    def _schedule(self, s: Any) -> None:
        at = self.kernel.call_at
        for ep in plan_faults(s.faults, seed=self.seed, stop_at=self.stop):
            if ep.action == "network":
                self.net.schedule(ep)
            else:
                at(ep.start, self._broker_fault, ep)
        groups = {c.name: c.count for c in s.consumers}
        for plan in plan_crashes(s, self.seed, groups, self.stop):
            fault = s.faults[plan.index]
            at(float(plan.at), self._crash, (plan.index, fault, plan.instance, plan.restart_after))

    def event(self, kind: str, target: str, detail: dict[str, Any]) -> None:
        self.rec.event(self.kernel.now, kind, target, detail)

    # -- broker faults ----------------------------------------------------------------------

    def _broker_fault(self, ev: Any) -> None:
        ep = ev.value
        now = self.kernel.now
        if self.killed and ep.action in ("kill", "restart", "pause"):
            # the node is still starting: the live runner acts once it is up again
            self.kernel.call_at(self.up_at, self._broker_fault, ep)
            return
        node = f"{self.model.scenario.broker.kind}0"
        detail = {**episode_detail(ep), "node": node, "action_s": 0.0}
        self.event("fault_start", ep.target, detail)
        end = dict(detail, rolled_back=False, clipped=ep.clipped, heal_s=0.0)
        if ep.action in ("kill", "restart", "pause"):
            self.event("broker_down", ep.target, {"node": node, "kind": ep.fault})
        if ep.action in ("kill", "restart"):
            up = max(ep.end, now) + self.restart_s
            self.forget_acks = ep.action == "kill"
            self._kill(up)
            if ep.action == "kill" and self.teardown_s > 0:  # clients learn of it later
                self.kernel.call_at(now + self.teardown_s, self._cut, up)
            else:  # a graceful stop closes the connections itself
                self._cut_connections(up, killed=ep.action == "kill")
            self.kernel.call_at(up, self._broker_up, (ep, end, node))
        elif ep.action == "pause":
            self._pause()
            self.kernel.call_at(ep.end, self._resume, (ep, end, node))
        else:
            self.alarms += 1
            self.kernel.call_at(ep.end, self._alarm_off, (ep, end))

    def _kill(self, up: float) -> None:
        """The broker process stops: nothing is routed, dispatched or confirmed any more;
        what was not on disk is gone. Its connections close later (``_cut``)."""
        b, now = self.b, self.kernel.now
        self.killed, self.up_at, self.killed_at = True, up, now
        b.up = False
        self.persistent -= self.journal.kill(now)  # not on disk yet: lost
        for q in self.model.queues.values():
            kept = [(max(ra, up), m) for ra, m in q.ready if m in self.persistent and q.durable]
            for _, m in q.ready:
                if not (m in self.persistent and q.durable):
                    q.attempts.pop(m, None)
                    self._drop(q, m)
            q.ready.clear()
            q.ready.extend(kept)
            q.free = max(q.free, up)
        b.pending -= len(self.held)  # publishes the broker never read
        self.held.clear()
        self.held_confirms.clear()

    def _cut(self, ev: Any) -> None:
        self._cut_connections(ev.value, killed=True)

    def _cut_connections(self, up: float, killed: bool = False) -> None:
        """The killed broker's sockets close (the process has exited, ``teardown_s`` after
        the kill): every client that reads its connection learns it now — a producer that
        only writes, at its next publish (`_send_into_closed`). Until then producers
        published into the void and consumers served what they held, their acks lost with
        the broker."""
        b, now = self.b, self.kernel.now
        recovered: dict[Queue, list[tuple[int, int]]] = {}
        for c in list(self.inflight):
            if c.queue is not None and (c.active or self.inflight[c]):
                back = self._disconnect(c, now)
                for q, m, attempt in back:
                    if m in self.persistent and q.durable:
                        recovered.setdefault(q, []).append((m, attempt))
                    else:
                        self._drop(q, m)
                self._reconnect_later(c, now, up)
        for q, m, attempt in self.journal.forgotten() if self.forget_acks else ():
            recovered.setdefault(q, []).append((m, attempt))  # its ack was not on disk
            b.mem += b.sizes[m] + b.mem_overhead
            b.pending += 1
        self.journal.clear()
        for q, copies in recovered.items():
            for m, attempt in sorted(copies, reverse=True):
                q.attempts[m] = attempt
                q.ready.appendleft((up, m))
        for p in self.model.producers:
            if not p.done and p not in self.dead:
                if killed and self._writes_only(p):
                    self.unaware[p] = up
                else:
                    self._cut_producer(p, now, up)
        if b.blocked and b.mem <= b.mem_threshold:
            b.unblock()

    def _drop(self, q: Queue, m: int) -> None:
        b = self.b
        b.mem -= b.sizes[m] + b.mem_overhead
        b.pending -= 1

    def _broker_up(self, ev: Any) -> None:
        ep, end, node = ev.value
        self.killed = False
        self.b.up = not self.paused
        self.b.cold_start(self.cold)
        self.event("fault_end", ep.target, end)
        self.event("broker_up", ep.target, {"node": node, "kind": ep.fault})

    def _pause(self) -> None:
        self.paused = True
        self.b.up = False
        for c in self.inflight:
            q = c.queue
            if q is not None and c.active:
                c.active = False
                if c in q.avail:
                    q.avail.remove(c)
                self.paused_consumers.append(c)

    def _resume(self, ev: Any) -> None:
        ep, end, node = ev.value
        self.paused = False
        self.b.up = not self.killed
        now = self.kernel.now
        for q in self.model.queues.values():
            q.free = max(q.free, now)
        for c in self.paused_consumers:
            if c.queue is not None and not c.active and c in c.queue.consumers:
                c.active = True
                if c.credit > 0 and c not in c.queue.avail:
                    c.queue.avail.append(c)
        self.paused_consumers.clear()
        self._replay()
        for p, value in self.held_confirms:
            p.call(self.b.d, self._late_confirm, (p, value))
        self.held_confirms.clear()
        for q in self.model.queues.values():
            q.pump()
        self.event("fault_end", ep.target, end)
        self.event("broker_up", ep.target, {"node": node, "kind": ep.fault})

    def _alarm_off(self, ev: Any) -> None:
        ep, end = ev.value
        self.alarms -= 1
        self._replay()
        self.event("fault_end", ep.target, end)

    def _replay(self) -> None:
        if self.paused or self.alarms or self.killed:
            return
        held, self.held = self.held, []
        for args in held:
            self.b.route(*args)


def install_faults(model: Model) -> FaultSim | None:
    """Apply the scenario's fault timeline to ``model`` (None when it has no faults)."""
    if not model.scenario.faults:
        return None
    return FaultSim(model)
