"""From a calibration profile to the simulator's per-message costs (docs/models.md §3, §9).

The profile holds what calibration measures — end-to-end latency fits, write (publish →
confirm) and read (deliver → ack) times, overhead regressions — and this module splits them
into the pieces the service models need, so that the model reproduces the calibrated figures at
light load and adds queueing on top:

- network delay ``d`` on every client↔broker hop (publish, confirm, deliver, ack);
- amqp: queue-process service ``s_q(size)`` (queueing resource, one per queue) and a
  non-queueing delivery residual ``δ(size) = L(size) − 2d − s_q(size)`` where ``L`` is the base
  latency fit of the load variant nearest the queue's offered rate, spread by the fit's ``sd``
  when the profile gives one (zero-mean noise from ``fit(δ, sd)``); the publisher-confirm
  residual ``write − 2d − s_q(ref) − confirm_overhead(ref)`` (mean; the sd is the write sd);
- threads: receive- and dispatch-stage service distributions, and (as for amqp) the
  non-queueing delivery residual ``δ(size) = L(size) − 2d − receive − dispatch``; the confirm
  residual is ``write − 2d − receive``;
- shared_lock: the lock is held ``write − 2d`` by a writer and ``read`` by a reader (GSPN §3b);
- all models: ``persistence(size)`` between acceptance and the confirm of a persistent message
  on a durable queue; ``confirm_overhead(size)`` on the publish path of confirming producers;
  ``prefetch_overhead(size)`` on the delivery path of prefetch-1 consumers; the fan-out cost
  per extra destination; the consumer's client overhead ``read`` after its service time
  (amqp, threads); ``publish_time`` of the client per publish without confirms.
Residuals are floored at zero: a profile whose parts exceed the measured total is not an error.

When the profile has a ``client_path`` (delays measured through the live workload with the
scenario's client library, `testbed.core.client_path`), the delivery residual is not a fit plus
a moment-matched spread but a draw from the measured delivery-delay table at the machine's
total message rate and the queue's message size, less the modelled stages
(:meth:`Costs.residual_table`): it keeps the measured floor, body and tail, with no point mass
and no negative delay. The consumer's client overhead after its service time is then the
measured ``hold`` table (timer overshoot, callback, ack) instead of the bare ``read`` time.
"""

from __future__ import annotations

__all__ = ["Costs", "derive_costs"]

from dataclasses import dataclass
from typing import Any

from testbed.core.client_path import ClientPath
from testbed.core.distributions import Deterministic
from testbed.core.profile import Fitted, MomentFit, Profile
from testbed.core.quantiles import QuantileTable
from testbed.core.threads import StageThreads


@dataclass(frozen=True)
class Costs:
    model: str
    d: float
    queue_a: float
    queue_b: float
    persist_a: float
    persist_b: float
    confirm_over_a: float
    confirm_over_b: float
    prefetch_over_a: float
    prefetch_over_b: float
    per_destination: float
    publish: Fitted
    confirm_residual: Fitted
    read: Fitted
    receive: Fitted
    dispatch: Fitted
    lock_write: Fitted
    lock_read: Fitted
    threads: int | StageThreads
    memory_overhead: float
    memory_base: float
    memory_threshold: float
    profile: Profile

    def delivery_jitter(self, rate: float) -> Fitted | None:
        """Distribution whose deviation from its mean spreads δ (None: δ is a constant).

        ``fit(δ(reference size), sd)`` of the base latency variant for ``rate`` (amqp only).
        """
        if self.model not in ("amqp", "threads"):
            return None
        fit = self._residual_fit(rate)
        a, b = self.delivery_residual(rate)
        mean = a + b * self.profile.reference_size
        if fit.sd <= 0 or mean <= 0:
            return None
        return MomentFit(mean=mean, sd=fit.sd).distribution()

    def _residual_fit(self, rate: float) -> Any:
        """amqp: the base fit nearest ``rate``. threads (ActiveMQ): the low-load fit always —
        its calibration's base is persistent, and at 100 msg/s the KahaDB store makes that
        5-6 ms (measured twice on 2026-11-21), a cost transient messages never pay; the
        persistent path is modelled by ``persistence`` on the confirm instead."""
        if self.model == "threads":
            return self.profile.base_latency(0.0)
        return self.profile.base_latency(rate)

    def residual_table(
        self,
        total_rate: float,
        size: float,
        persistent: bool,
        confirms: bool = False,
        follow_up: bool = False,
    ) -> QuantileTable | None:
        """The measured delivery delay at this point less the modelled stages (2d and the
        queue process, or the two thread stages), floored at 0; None without a client path."""
        cp = self.profile.client_path
        if cp is None or self.model not in ("amqp", "threads"):
            return None
        slope = self._residual_fit(total_rate).b
        table = cp.delivery_table(total_rate, size, persistent, slope, confirms, follow_up)
        if self.model == "amqp":
            stages = 2 * self.d + self.queue_a + self.queue_b * size
        else:
            stages = 2 * self.d + float(self.receive.mean + self.dispatch.mean)
        return table.shifted(-stages)

    def turnaround_table(self, total_rate: float, ref: float, slope: float) -> QuantileTable | None:
        """A prefetch-1 consumer's ack → start of a message already waiting at the broker
        (`ClientPath.turnaround`; None: not measured), as a queue's residual after a wait:
        less the two hops the model adds (the ack's to the broker, the push back), and moved
        from the small size it was measured at to ``ref`` by ``slope`` (s/byte), as the
        delivery residual is (`emulator.sim.paths.set_residual`)."""
        cp = self.profile.client_path
        if cp is None or self.model not in ("amqp", "threads"):
            return None
        turn = cp.turnaround_table(total_rate)
        if turn is None:
            return None
        small = min(p.size for p in cp.delivery)
        return turn.shifted(slope * (ref - small) - 2 * self.d)

    def confirm_table(self, total_rate: float) -> QuantileTable | None:
        """The measured publish → confirm of a persistent message (None: not measured)."""
        cp = self.profile.client_path
        return None if cp is None else cp.confirm_table(total_rate)

    def confirm_extra(self, persistent: bool) -> tuple[float, float]:
        """A confirming producer's overhead on the publish path, ``(a, b)`` of a + b·size.
        None when the client path measured confirmed deliveries of the message's persistence:
        those draw from that table, which holds the confirm-mode publish already (counted
        twice before: +0.11 ms on RabbitMQ). Without such points (transient ones before
        calibration revision 5) the message draws from points measured from a producer that
        does not ask for confirms (`ClientPath.delivery_table`), so it pays it."""
        cp = self.profile.client_path
        measured = cp is not None and any(
            p.confirms and p.persistent == persistent for p in cp.delivery
        )
        if measured and self.model in ("amqp", "threads"):
            return 0.0, 0.0
        return self.confirm_over_a, self.confirm_over_b

    def hold_table(self, total_rate: float) -> QuantileTable | None:
        """The consumer's measured hold beyond its service time (None: use ``read``)."""
        cp = self.profile.client_path
        if cp is None or self.model == "shared_lock":
            return None
        return cp.hold_table(total_rate)

    def client_cpu(self) -> tuple[float, float, float] | None:
        """CPU seconds of one Locust process per publish, per delivery before its handler and
        per delivery after its service (None: not measured, so the processes are not simulated
        as shared servers; ``emulator.sim.client_cpu``). A profile with only the total per
        operation books it all before a delivery's handler, as it was measured to mean. With
        the copy gap measured, a delivery's work before its handler is that gap (at most the
        fitted receive), and the rest of the receive is booked with its ack."""
        cp = self.profile.client_path
        if not _cpu_measured(cp):
            return None
        assert cp is not None
        if cp.cpu is not None:
            u = cp.cpu
            publish = u.publish + (u.publish_rest or 0.0)  # its CPU outside the span, if split
            if cp.copy_gap is None:
                return (publish, u.receive, u.ack)
            # only the measured work before a handler delays it; the rest of the fitted
            # receive CPU still occupies the process, after the service with the ack
            before = min(cp.copy_gap, u.receive)
            return (publish, before, u.ack + u.receive - before)
        c = cp.cpu_per_op or 0.0
        return (c, c, 0.0)

    def follow_gap(self) -> float | None:
        """How far apart a handler's follow-ups are sent (``ClientPath.follow_gap``; None: not
        measured, the publish CPU spaces them)."""
        cp = self.profile.client_path
        return cp.follow_gap if cp is not None else None

    def size_slope(self, rate: float) -> float:
        """s/byte of the delivery residual (the base fit's slope less the queue process's)."""
        return self.delivery_residual(rate)[1]

    def delivery_residual(self, rate: float) -> tuple[float, float]:
        """δ(size) = a + b·size for a queue offered ``rate`` msg/s: what the base latency fit
        has beyond the modelled stages — amqp: 2d + the queue process; threads: 2d + the
        receive and dispatch stages (0 for shared_lock, whose lock times are the whole path)."""
        fit = self._residual_fit(rate)
        if self.model == "amqp":
            stages_a, stages_b = 2 * self.d + self.queue_a, self.queue_b
        elif self.model == "threads":
            stages_a, stages_b = 2 * self.d + float(self.receive.mean + self.dispatch.mean), 0.0
        else:
            return 0.0, 0.0
        return max(fit.a - stages_a, 0.0), max(fit.b - stages_b, 0.0)


def derive_costs(
    profile: Profile,
    model: str,
    threads: int | StageThreads,
    memory_limit: float,
    *,
    table_stages: bool = False,
) -> Costs:
    """Costs for service model ``model`` with ``threads`` broker threads (threads model).

    ``table_stages``: the simulator, which draws a measured client path's tables, takes the
    broker's stages as `_broker_stages` fits them under those tables; the closed forms keep the
    profile's laws (their Jackson and M/M/c stations need exponential stages)."""
    d = profile.network_delay
    ref = profile.reference_size
    qs = profile.queue_service
    co = profile.confirm_overhead
    w = profile.write_time
    queue_a, receive, dispatch = _broker_stages(profile, model, table_stages)
    if model == "amqp":
        residual = w.distribution(-(2 * d + queue_a + qs.b * ref + co.at(ref)))
    elif model == "threads":
        residual = w.distribution(-(2 * d + float(receive.mean) + co.at(ref)))
    else:
        residual = _zero()
    return Costs(
        model=model,
        d=d,
        queue_a=queue_a if model == "amqp" else 0.0,
        queue_b=qs.b if model == "amqp" else 0.0,
        persist_a=profile.persistence.a,
        persist_b=profile.persistence.b,
        confirm_over_a=co.a,
        confirm_over_b=co.b,
        prefetch_over_a=profile.prefetch_overhead.a,
        prefetch_over_b=profile.prefetch_overhead.b,
        per_destination=_per_destination(profile, table_stages),
        publish=profile.publish_time.distribution(),
        confirm_residual=residual,
        read=profile.read_time.distribution() if model != "shared_lock" else _zero(),
        receive=receive,
        dispatch=dispatch,
        lock_write=w.distribution(-2 * d),
        lock_read=profile.read_time.distribution(),
        threads=threads,
        memory_overhead=profile.memory.per_message_overhead,
        memory_base=profile.memory.base_bytes,
        memory_threshold=memory_limit * profile.memory.high_watermark,
        profile=profile,
    )


def _per_destination(profile: Profile, simulator: bool) -> float:
    """Broker time per extra copy of a fan-out, on every copy: the closed forms' (and the
    simulator's without measured client CPU costs) fitted slope of the median copy's latency on
    the number of bound queues. Calibration's consumers of a fan-out share one process, so that
    slope is mostly *their* work, one copy after the other; the simulator books that work on
    its Locust processes (``emulator.sim.client_cpu``) when the client path measured it, and
    then adds nothing here. Re-predicting the fan-out 1→10 on ActiveMQ of 2026-11-27 07:20 with
    its own profile, the fitted 0.21 ms × 9 on every copy put the first copy's median at
    2.47 ms, measured 0.72 ms; without it 0.59 ms, and every rank within 0.4 ms. What the
    broker's routing does cost every copy the client path measures apart from that work, as
    its first copy's lateness against a one-queue message (``ClientPath.fan_delay``, revision
    8: 0.02-0.055 ms a queue between calibrations of one machine, a noisy figure)."""
    cp = profile.client_path
    if simulator and cp is not None and _cpu_measured(cp):
        return cp.fan_delay or 0.0
    return profile.routing.per_destination


def _cpu_measured(cp: ClientPath | None) -> bool:
    """The client path measured the Locust process's CPU per operation (split or whole)."""
    return cp is not None and (cp.cpu is not None or bool(cp.cpu_per_op))


def _broker_stages(
    profile: Profile, model: str, under_tables: bool
) -> tuple[float, Fitted, Fitted]:
    """The broker's stages on the delivery path: amqp's queue-process constant ``queue_a``,
    threads' receive and dispatch service laws.

    Without a client path: as the profile fits them. With one, the delivery tables are the
    whole path, measured — its spread included — and a stage only moves them by its mean
    (`Costs.residual_table`). So the stages are then constant (a random stage would spread the
    measured tables a second time: threads' exponential stages put the ActiveMQ quickstart's
    p50 at 1.06 ms where 0.89 ms was measured, its p1 at half the fastest delivery), and
    together no longer than the fastest delivery the client path measured, less the two network
    hops: no stage on that path can take longer than the whole path, and a longer one would cut
    the tables off at zero (a point mass)."""
    qa = profile.queue_service.a
    rec, dis = profile.threads.receive, profile.threads.dispatch
    cp = profile.client_path
    if not under_tables or cp is None or model not in ("amqp", "threads"):
        return qa, rec.distribution(), dis.distribution()
    room = max(min(p.table.floor for p in cp.delivery) - 2 * profile.network_delay, 0.0)
    if model == "amqp":
        return min(qa, room), rec.distribution(), dis.distribution()
    total = rec.mean + dis.mean
    k = min(1.0, room / total) if total > 0 else 1.0
    return qa, Deterministic(value=rec.mean * k), Deterministic(value=dis.mean * k)


def _zero() -> Fitted:
    return MomentFit(mean=0.0).distribution()
