"""Build the SimPy model of one replication from a Scenario and a calibration profile, run it.

    result = Model(scenario, profile, replication=0).run()
    result.tables["deliveries"]            # pyarrow tables with the record schemas
    result.ledger                          # Jepsen-style totals

The run follows the live pipeline's clock: t = 0 is the workload start; warm-up
``[0, warmup)``, load ``[warmup, duration)``, then drain — producers have stopped, consumers go
on until every published copy is finished or ``drain_timeout`` has passed. The phases are
written to ``events`` as rows of kind ``phase`` (detail ``{"phase": ...}``), as the live run
does; warm-up rows are kept. The timeseries sampler is an ordinary SimPy process, and so are
the autoscaling controllers: ``add_process`` starts one, ``observe`` gives a controller the
per-queue figures a live control loop reads (docs/models.md §7–§8). Fault models reach the
producers, broker and consumers through the hook points of ``emulator.sim.links``: ``add_link``
registers one (the fault timeline registers its own), and they see every event in that order.
"""

from __future__ import annotations

__all__ = ["Model", "SimResult"]

import math
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from emulator.sim.broker import make_broker
from emulator.sim.client_cpu import Processes
from emulator.sim.consumers import Consumer, FollowUp
from emulator.sim.costs import derive_costs
from emulator.sim.failures import failure_draw, key_prefix, keyed_groups
from emulator.sim.faults import install_faults
from emulator.sim.kernel import Kernel, batch_for, stream, uniforms
from emulator.sim.links import Link, Links
from emulator.sim.paths import queue_traffic, set_residual, total_rate
from emulator.sim.producers import Producer, picker
from emulator.sim.queues import Queue
from emulator.sim.recorder import OUTCOME_CODES, Recorder
from testbed.core.arrivals import schedule
from testbed.core.broker_kinds import KINDS
from testbed.core.ledger import compute_ledger
from testbed.core.load import arrival_mean_rate, offered_load
from testbed.core.phases import PHASE, phase_marks
from testbed.core.profile import Profile
from testbed.core.quantiles import table_sampler
from testbed.core.records import Ledger
from testbed.core.scenario import ClosedArrival, ConsumerSpec, ProducerSpec, Scenario
from testbed.core.seeds import arrival_rng, replication_seed
from testbed.core.visibility import dead_letter_queue, holds_head_of_line

UNROUTABLE = OUTCOME_CODES["unroutable"]


def _begin(ev: Any) -> None:
    ev.value.begin()


def _attach(ev: Any) -> None:
    consumer, queue = ev.value
    consumer.start(queue)


@dataclass
class SimResult:
    replication: int
    tables: dict[str, pa.Table]
    ledger: Ledger
    messages: int
    sim_end: float
    wall_s: float


class Model:
    """The assembled model of one replication."""

    def __init__(self, scenario: Scenario, profile: Profile, replication: int = 0) -> None:
        s = self.scenario = scenario
        self.replication = replication
        self.seed = s.seed
        self.rep_seed = replication_seed(s.seed, replication)  # the live replication's seed
        self.kernel = Kernel()
        self.env = self.kernel.env
        self.rec = Recorder()
        self.links = Links()  # hooks on every path (emulator.sim.links), in registration order
        self.link: Links | None = None  # ``links`` once one is registered
        kind = s.broker.model or "amqp"
        threads = s.broker.threads
        limit = float(s.broker.memory_limit)
        self.costs = derive_costs(profile, kind, threads, limit, table_stages=True)
        self.broker = make_broker(
            kind, self.kernel, self.costs, self.rec.m_size, s.seed, replication
        )
        self.keyed = keyed_groups(s)  # failures drawn as the live twin's (sim.failures)
        if self.keyed:
            self.broker.crn_keys = {}
        self.loads = offered_load(s)
        self.traffic = queue_traffic(s)
        self.total_rate = total_rate(self.loads)
        self.hold_table = self.costs.hold_table(self.total_rate)  # once: scaling adds consumers
        confirm = self.costs.confirm_table(self.total_rate)
        if confirm is not None and kind in ("amqp", "threads"):
            self.broker.confirm_draw = table_sampler(confirm, self._stream("broker:confirm-path"))
        self.processes = Processes(  # Locust's CPU (§9)
            s.workers, self.costs.client_cpu(), self.costs.follow_gap()
        )
        facts = KINDS.get(s.broker.kind)
        self.follow_ups_together = bool(facts and facts.follow_ups_together)
        self.queues: dict[str, Queue] = {}
        self._build_queues()
        self.producers: list[Producer] = []
        self.active_producers = 0
        for p in s.producers:
            self._build_producers(p)
        self.consumers: list[Consumer] = []
        for c in s.consumers:
            self._build_consumers(c)
        self.stop_event = self.env.event()
        self.horizon = float(s.duration + s.drain_timeout)
        self._phases()
        self.faults = install_faults(self)  # the scenario's fault timeline (docs/models.md §6)
        self.kernel.process(self._sampler())
        from emulator.sim.autoscale import attach_autoscalers

        self.autoscalers = attach_autoscalers(self)

    # -- construction -----------------------------------------------------------------------

    def add_link(self, link: Link) -> None:
        """Register ``link`` on the broker, every producer and every consumer (also those made
        later), after the links already registered."""
        self.links.add(link)
        self.link = self.links
        self.broker.link = self.links
        for p in self.producers:
            p.link = self.links
        for c in self.consumers:
            c.link = self.links

    def _stream(self, name: str) -> Any:
        return stream(self.seed, self.replication, name)

    def _queue(self, name: str, durable: bool, spec: Any = None) -> Queue:
        rate = self.loads[name].arrival_rate if name in self.loads else 0.0
        a, b = self.costs.delivery_residual(rate)
        vis = spec.visibility if spec is not None else None
        q = Queue(
            self.broker,
            name,
            self.rec.name(name),
            durable=durable,
            max_length=spec.max_length if spec is not None else None,
            vt=float(vis.timeout) if vis is not None else None,
            max_deliveries=vis.max_deliveries if vis is not None else 1_000_000,
            in_order=holds_head_of_line(vis),
            deliver_a=a,
            deliver_b=b,
        )
        q.locked = self.broker.kind == "shared_lock"
        set_residual(q, self.costs, self.traffic.get(name), self.total_rate, rate, self._stream)
        self.queues[name] = q
        return q

    def _build_queues(self) -> None:
        s = self.scenario
        for spec in s.topology.queues:
            self._queue(spec.name, spec.durable, spec).transient = spec.transient
        if any(spec.transient for spec in s.topology.queues):
            self.broker.transient = True
            self.broker.on_unroutable = self._unroutable
        for lb in s.topology.load_balanced:
            for i in range(lb.max_queues):
                self._queue(lb.member(i), lb.durable)
        for spec in s.topology.queues:
            if spec.visibility is None:
                continue
            dlq = dead_letter_queue(spec.name, spec.visibility)
            target = self.queues.get(dlq) or self._queue(dlq, spec.durable)
            self.queues[spec.name].dlq = target

    def _unroutable(self, p: Producer, m: int) -> None:
        """A ``mandatory`` publish no queue took comes back: its ``unroutable`` row."""
        now = self.env.now
        self.rec.delivery(m, p.dest, self.rec.name(""), 1, now, now, UNROUTABLE)

    def routes(
        self, queue: str | None, exchange: str | None, key: str | list[str] | None
    ) -> list[tuple[Queue, ...]]:
        """Destination alternatives (one is chosen uniformly per message)."""
        s = self.scenario
        if queue is not None:
            for lb in s.topology.load_balanced:
                if lb.alias == queue:  # elastic alias: members share the traffic (§7 hook)
                    return [(self.queues[lb.member(i)],) for i in range(lb.queues)]
            return [(self.queues[queue],)]
        keys = key if isinstance(key, list) else [key]
        return [tuple(self.queues[q] for q in s.routed_queues(exchange or "", k)) for k in keys]

    def _build_producers(self, spec: ProducerSpec) -> None:
        s = self.scenario
        stop = min(float(spec.stop) if spec.stop is not None else math.inf, float(s.duration))
        start = float(spec.start)
        arrival = spec.arrival
        rate = arrival_mean_rate(arrival)
        closed = isinstance(arrival, ClosedArrival)
        if isinstance(arrival, ClosedArrival):
            think = float(arrival.think_time.mean)
            rate = 1.0 / think if think > 0 else 1e4
        expected = (rate or 1.0) * max(stop - start, 0.0)
        batch = batch_for(expected)
        routes = self.routes(spec.queue, spec.exchange, spec.routing_key)
        flow = self.rec.name(spec.type_label)
        dest = self.rec.name(spec.destination)
        co = self.costs
        for i in range(spec.count):
            name = f"{spec.name}-{i}"
            base = f"producer:{spec.name}:{i}"
            p = Producer(
                name,
                self.rec.name(name),
                self.broker,
                self.rec,
                flow=flow,
                dest=dest,
                routes=routes,
                pick=picker(self._stream(base + ":key"), len(routes)) if len(routes) > 1 else None,
                size=spec.size.sampler(self._stream(base + ":size"), batch),
                publish_cost=co.publish.sampler(self._stream(base + ":publish"), batch),
                confirms=spec.confirms,
                persistent=spec.persistent,
                confirm_extra=co.confirm_extra(spec.persistent),
                start=start,
                stop=stop,
                max_messages=spec.max_messages,
                times=None
                if closed
                else schedule(arrival, arrival_rng(self.rep_seed, spec.name, i), start, stop),
                think=arrival.think_time.sampler(self._stream(base + ":think"), batch)
                if isinstance(arrival, ClosedArrival)
                else None,
                on_done=self._producer_done,
                key_prefix=key_prefix(spec.name, i),
            )
            p.cpu = self.processes.next()
            p.mandatory = spec.mandatory
            self.producers.append(p)
            self.active_producers += 1
            self.kernel.call(0.0, _begin, p)

    def _producer_done(self, p: Producer) -> None:
        self.active_producers -= 1

    def _build_consumers(self, spec: ConsumerSpec) -> None:
        lb = next((x for x in self.scenario.topology.load_balanced if x.alias == spec.queue), None)
        for i in range(spec.count):
            c = self.make_consumer(spec, i)
            self.consumers.append(c)
            qname = lb.member(i % lb.queues) if lb is not None else spec.queue
            q = self.queues[qname]
            self.kernel.call(float(spec.start), _attach, (c, q))

    def make_consumer(self, spec: ConsumerSpec, i: int) -> Consumer:
        """Instance ``i`` of consumer group ``spec``, not attached (autoscaling adds more)."""
        s = self.scenario
        n = max(spec.count, 1)
        load = self.loads.get(spec.queue)
        expected = (load.attempt_rate if load else 1.0) * float(s.duration) / n
        batch = batch_for(expected)
        co = self.costs
        pre = (co.prefetch_over_a, co.prefetch_over_b) if spec.prefetch == 1 else (0.0, 0.0)
        name = f"{spec.name}-{i}"
        base = f"consumer:{spec.name}:{i}"
        follow = [
            FollowUp(
                on=self.rec.name(f.on) if f.on is not None else -1,
                probability=f.probability,
                flow=self.rec.name(f.message_type),
                dest=self.rec.name(f.destination),
                queues=self.routes(f.queue, f.exchange, f.routing_key)[0],
                size=f.size.sampler(self._stream(f"{base}:follow-up:{j}:size"), batch),
                persistent=f.persistent,
            )
            for j, f in enumerate(spec.follow_ups)
        ]
        c = Consumer(
            name,
            self.rec.name(name),
            self.broker,
            self.rec,
            ack=spec.ack,
            prefetch=spec.prefetch,
            service=spec.service_time.sampler(self._stream(base + ":service"), batch),
            read=self._hold(base, batch),
            failure_probability=spec.failure_probability,
            uniform=failure_draw(
                self.broker,
                spec,
                spec.name in self.keyed,
                self.rep_seed,
                uniforms(self._stream(base + ":failure"), batch),
            ),
            follow_ups=follow,
            follow_uniform=uniforms(self._stream(base + ":follow-up"), batch),
            extra_a=pre[0],
            extra_b=pre[1],
        )
        c.link = self.link
        c.cpu = self.processes.next()
        c.together = self.follow_ups_together
        return c

    def _hold(self, base: str, batch: int) -> Any:
        """The consumer's client time after its service: the measured hold table when the
        profile has a client path, else the bare read (deliver → ack) time."""
        table = self.hold_table
        if table is not None:
            return table_sampler(table, self._stream(base + ":hold"), batch)
        return self.costs.read.sampler(self._stream(base + ":read"), batch)

    def _phases(self) -> None:
        s = self.scenario
        for t, phase in phase_marks(s.warmup, s.duration):
            self.rec.event(t, PHASE, s.name, {"phase": phase})

    # -- processes --------------------------------------------------------------------------

    def add_process(self, gen: Generator[Any, Any, Any]) -> None:
        """Start an extra SimPy process (fault injector, autoscaling controller, ...)."""
        self.kernel.process(gen)

    def observe(self) -> dict[str, dict[str, float]]:
        """Per-queue figures a controller reads: ready, unacked, consumers, counters."""
        return {
            name: {
                "depth_ready": len(q.ready) + q.staged,
                "depth_unacked": q.unacked,
                "consumers": len(q.consumers),
                "published": q.published,
                "delivered": q.delivered,
                "acked": q.acked,
            }
            for name, q in self.queues.items()
        }

    def _sampler(self) -> Generator[Any, Any, None]:
        s = self.scenario
        w = float(s.recording.window)
        duration = float(s.duration)
        queues = list(self.queues.values())
        prev = {q.name: (0, 0, 0) for q in queues}
        b = self.broker
        k = 0
        while True:
            k += 1
            t = k * w
            yield self.env.timeout(t - self.env.now)
            blocked = len(b.waiters)
            memory = int(self.costs.memory_base + max(b.mem, 0.0))
            for q in queues:
                p0, d0, a0 = prev[q.name]
                prev[q.name] = (q.published, q.delivered, q.acked)
                self.rec.sample(
                    t,
                    q.name,
                    len(q.ready) + q.staged,
                    q.unacked,
                    (q.published - p0) / w,
                    (q.delivered - d0) / w,
                    (q.acked - a0) / w,
                    len(q.consumers),
                    blocked,
                    b.up,
                    memory,
                )
            drained = b.pending <= 0 and self.active_producers == 0
            if (t >= duration and drained) or t >= self.horizon:
                break
        self.stop_event.succeed()

    # -- run --------------------------------------------------------------------------------

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        self.env.run(until=self.stop_event)
        tables = self.rec.tables(self.replication)
        return SimResult(
            replication=self.replication,
            tables=tables,
            ledger=compute_ledger(tables["messages"], tables["deliveries"]),
            messages=self.rec.messages,
            sim_end=float(self.env.now),
            wall_s=time.perf_counter() - t0,
        )
