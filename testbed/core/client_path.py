"""The client path of a calibration profile: delays measured through the live workload.

Calibration (``mqbed calibrate``, or the quick calibration a run makes on a machine it has no
profile for) runs a short scenario through the same Locust users, broker adapter and client
library as a real run, and keeps from its records two empirical distributions per point
(docs/models.md §9):

- ``delivery``: publish → the consumer starting on the message, at light load (consumers that
  serve in zero time and are never backlogged), per total message rate of the machine, message
  size, persistence, whether the producer waits for confirms and whether a consumer published
  it from its handler (a follow-up). This is the whole non-queueing path — client send,
  network, broker, push to the consumer, the consumer's event loop — with its measured floor
  and tail.
- ``confirm``: publish → confirm of a persistent message on a durable queue (its write to the
  broker's store and the way back), from the producer that asks for confirms.
- ``hold``: how much longer than its service time a live consumer holds the next message
  back: the gap between the starts of two messages served back to back, minus the service
  time asked for (timer overshoot of the event loop, the callback, the ack, the record).
- ``turnaround``: from a prefetch-1 consumer's ack to its start on the next message when that
  message was already waiting at the broker: the ack's way there, the dispatch and the push
  back — the part of the delivery path a message still has ahead after waiting at the broker.
- ``copy_gap``: the gap between the handler starts of a fanned-out message's copies whose
  consumers share one process: the work a delivery costs its process before its handler.
- ``fan_delay``: how much later the copies of a fanned-out message start than a message to one
  queue, per extra queue (the broker's routing to each of them).
- ``follow_gap``: how far apart a handler's follow-ups are sent (its publishes' wall time).
- ``wake``: how much longer a message takes when the machine was idle before it was published
  (no publish and no handler ending for that long): the delivery tables are measured on a
  machine that is never idle for more than a few milliseconds.
- ``consumer_idle``: how much faster a message reaches a consumer that finished its previous
  one a few milliseconds before it was published, by that consumer's idle time: the delivery
  tables are stored for a cold consumer (`testbed.core.consumer_idle`).
- ``cpu_per_op``: the CPU one Locust process spends per publish or delivery — what makes the
  users of one process wait for each other (``emulator.sim.client_cpu``);
- ``cpu``: where that CPU goes — a publish, a delivery before its handler starts (receive) and
  after its service (ack and record): work that delays the next delivery and work that does
  not (``testbed.observe.process_cpu``);
- ``proxy_hop``: what one crossing of a fault-proxy link adds to a message's way, for the runs
  whose clients connect through the proxy (`testbed.calibration.proxy_hop`).

Between measured points a table is interpolated quantile by quantile: in log(rate) and in
size; outside the measured range it is clamped (rate) or shifted by the profile's linear
size cost (size).
"""

from __future__ import annotations

__all__ = [
    "BUSY_GENERATOR",
    "ClientPath",
    "CpuSplit",
    "HoldPoint",
    "PathPoint",
    "PointFit",
    "Provenance",
    "WakePoint",
    "wake_delay",
]

import math

import numpy as np
from pydantic import Field, field_validator

from testbed.core.broker_kinds import ClientName
from testbed.core.consumer_idle import IdlePoint, idle_curve
from testbed.core.quantiles import PROBS, QuantileTable, ks_to_sample, mix, quantile_table
from testbed.core.strict import Strict

Client = ClientName

PROTOCOL = 10
"""Revision of the calibration that measures a client path. A cached profile measured by an
earlier one is measured again by the next run (`ClientPath.missing`):

1. the first client paths;
2. persistent deliveries measured at every load level, not only the high one; and ActiveMQ's
   STOMP sessions without Nagle's algorithm, whose held-back frames had added 15-45 ms stalls to
   every ActiveMQ table;
3. the CPU of a client operation split into publish, receive and ack (``ClientPath.cpu``);
4. persistent deliveries from a producer that asks for confirms (``PathPoint.confirms``),
   follow-ups published by consumers from their handlers (``PathPoint.follow_up``), and the
   confirm of a persistent message (``confirm``);
5. the turnaround of a prefetch-1 consumer (``turnaround``), its load taken from the hold
   consumers, one fewer per phase; transient deliveries from a producer that asks for confirms
   (``PathPoint.confirms`` on a transient point); the gap between a fanned-out message's
   copies (``copy_gap``);
6. the wake-up of an idle machine (``wake``): a sparse stream after the load phases;
7. the delivery to a consumer by its own idle time (``consumer_idle``), the delivery tables
   stored for a cold consumer (`testbed.core.consumer_idle`);
8. the delay of a fanned-out message's copies per extra queue (``fan_delay``), and the machine's
   idle time before a publish no longer cut short by a sibling copy's own publish instant;
9. the first phase's streams primed for 8 s before its window opens (`path_scenario.PRIME`): its
   first seconds were cold, and the 130 msg/s tables slower than the 244 msg/s ones;
10. a quiet phase of 30 msg/s after the sparse stream, the low end of the rate axis: below
    130 msg/s the tables were clamped to the low phase's, with a loaded machine's tails; since
    2026-11-29 also a handler's burst of three follow-ups after the quiet phase: how far apart
    they are sent (``follow_gap``). A profile without it spaces follow-ups by the publish CPU
    and is not measured again for it (the shipped ones do not carry it yet)."""

WAKE_AWAKE = 0.01
"""Idle time (s) within which the machine counts as awake: the baseline of the ``wake`` points
(a RabbitMQ run's first copies took a median 0.72 ms after 5-10 ms of idle, 1.10 ms after 15-20
ms and 1.2-1.3 ms after anything longer; an ActiveMQ run's 0.47 ms up to 20 ms, then rising to
0.96 ms after 100-200 ms)."""

BUSY_GENERATOR = 0.8
"""Share of a core above which a Locust process is called a likely bottleneck of its run (the
live run's warning and the prediction's)."""


class CpuSplit(Strict):
    """Mean CPU seconds of one Locust process per publish (build, send, record), per delivery
    before its handler starts (socket reads, frame parsing: ``receive``) and per delivery after
    its service (ack and record: ``ack``)."""

    publish: float = Field(ge=0)
    receive: float = Field(ge=0)
    ack: float = Field(ge=0)
    publish_rest: float | None = Field(default=None, ge=0)
    """CPU per publish outside its span (its timer's wake-up), split from ``receive`` by the
    spread stream (`path_streams.SPREAD`); None: not split, ``receive`` holds it."""


class PathPoint(Strict):
    rate: float = Field(gt=0)
    """Total messages per second on the machine while the point was measured."""
    size: float = Field(ge=0)
    persistent: bool = False
    confirms: bool = False
    """Published by a producer that asks for confirms."""
    follow_up: bool = False
    """Published by a consumer from its handler (a follow-up), not by a producer."""
    table: QuantileTable


class HoldPoint(Strict):
    rate: float = Field(gt=0)
    service: float = Field(ge=0)
    """The mean service time of the backlogged consumers the table was measured with (s)."""
    table: QuantileTable


class WakePoint(Strict):
    """After ``idle`` seconds in which the machine published nothing and no handler ended, a
    message's delivery took ``extra`` seconds longer (median) than after a short idle."""

    idle: float = Field(gt=0)
    extra: float = Field(ge=0)
    n: int = Field(ge=0)
    """Deliveries in the idle bin the point summarises."""


class PointFit(Strict):
    """Goodness of fit of one stored point: KS distance of its table to its own sample."""

    point: str
    n: int
    ks: float

    @classmethod
    def held_out(cls, point: str, sample: np.ndarray) -> PointFit:
        """KS distance of a table built on every other value to the other half (out of
        sample)."""
        if len(sample) < 4:
            return cls(point=point, n=len(sample), ks=float("nan"))
        ks = ks_to_sample(quantile_table(sample[::2]), sample[1::2])
        return cls(point=point, n=len(sample), ks=ks)


class Provenance(Strict):
    """Where and when the client path was measured."""

    host: str
    """Machine class (the profile's host) or this machine's hostname for a cached profile."""
    hostname: str = ""
    date: str
    broker_version: str
    client: Client
    command: str = ""
    wall_s: float = 0.0
    load_average: list[float] = Field(default_factory=list)
    """1-minute load average before and after (foreign load makes the figures noisy)."""
    rejected: list[str] = Field(default_factory=list)
    """Attempts thrown away because the machine was busy with foreign work."""
    foreign_cores: float | None = None
    """Cores other work used on average during the kept attempt (None: not recorded)."""
    cpu_loop_ms: float | None = None
    """This machine's Python speed when it was measured (`testbed.observe.cpu_speed`; None:
    not recorded)."""
    busy: bool = False
    """Every attempt was busy: the tables carry foreign load (a run measures them again)."""
    pooled: list[str] = Field(default_factory=list)
    """Dates of the calibrations whose tables were pooled into this one, the newest (this
    one's own) last (`testbed.calibration.pooling`); empty: one calibration's own."""

    @property
    def taken_busy(self) -> bool:
        """Measured under foreign load (also for a profile older than ``busy``)."""
        return self.busy or any(r.startswith("every attempt was busy") for r in self.rejected)


class ClientPath(Strict):
    client: Client
    probabilities: list[float] = Field(default_factory=lambda: list(PROBS))
    delivery: list[PathPoint]
    hold: list[HoldPoint] = Field(default_factory=list)
    confirm: list[PathPoint] = Field(default_factory=list)
    """Publish → confirm of persistent messages on a durable queue, from a producer that waits
    for each confirm (per total rate; empty: not measured, the broker model's persistence
    cost applies)."""
    turnaround: list[HoldPoint] = Field(default_factory=list)
    """Ack → start of a message that waited at the broker, per total rate, from a prefetch-1
    consumer (empty: not measured; a waiting message then draws the whole delivery table after
    its dispatch, as before)."""
    copy_gap: float | None = Field(None, ge=0)
    """Median gap (s) between the handler starts of consecutive copies of one fanned-out
    message whose consumers share a Locust process: the part of ``cpu.receive`` done before a
    handler starts (None: not measured; all of it is booked there)."""
    fan_delay: float | None = Field(None, ge=0)
    """How much later (s) every copy of a message routed to n queues starts than a message to
    one queue, per extra queue: the simulator's per-destination cost (None: not measured; none
    is added, `emulator.sim.costs`)."""
    follow_gap: float | None = Field(None, ge=0)
    """Median gap (s) between the publish stamps of consecutive follow-ups of one handler
    (None: not measured; the simulator spaces them by ``cpu.publish``)."""
    wake: list[WakePoint] = Field(default_factory=list)
    """The wake-up of an idle machine, by idle time (increasing; empty: not measured, no
    wake-up is added)."""
    consumer_idle: list[IdlePoint] = Field(default_factory=list)
    """The delivery to a consumer by its own idle time before the publish (idle increasing,
    factors non-decreasing; empty: not measured, every delivery draws the tables unscaled)."""
    fit: list[PointFit] = Field(default_factory=list)
    cpu_per_op: float | None = Field(None, ge=0)
    """Marginal CPU seconds one Locust process spends per client operation — a publish, or a
    delivery with its ack and record — fitted over the calibration's per-second samples (0: no
    positive slope found; None: measured before this was recorded)."""
    cpu: CpuSplit | None = None
    """Where ``cpu_per_op`` goes (None: not measured; the simulator then books the whole
    operation before a delivery's handler, as revision 2 did)."""
    proxy_hop: QuantileTable | None = None
    """One crossing of a fault-proxy link (s): what a publish, a confirm, a delivery or an ack
    of a scenario with a network fault takes longer than on a direct connection (None: not
    measured; the simulator then adds none)."""
    provenance: Provenance
    protocol: int = Field(1, ge=1)
    """The calibration revision that measured it (`PROTOCOL`); 1 for profiles older than this
    field."""

    @field_validator("probabilities")
    @classmethod
    def _grid(cls, p: list[float]) -> list[float]:
        if [round(x, 6) for x in p] != [round(x, 6) for x in PROBS]:
            raise ValueError("the tables were stored at another probability grid")
        return p

    @field_validator("wake")
    @classmethod
    def _increasing(cls, pts: list[WakePoint]) -> list[WakePoint]:
        idle = [WAKE_AWAKE, *(p.idle for p in pts)]
        if any(b <= a for a, b in zip(idle, idle[1:], strict=False)):
            raise ValueError(
                f"wake points need idle times increasing from above {WAKE_AWAKE} s, got "
                f"{[p.idle for p in pts]}"
            )
        return pts

    @field_validator("consumer_idle")
    @classmethod
    def _monotone(cls, pts: list[IdlePoint]) -> list[IdlePoint]:
        for rate in sorted({p.rate for p in pts}):
            idle = [p.idle for p in pts if p.rate == rate]
            factor = [p.factor for p in pts if p.rate == rate]
            if idle != sorted(set(idle)) or factor != sorted(factor):
                raise ValueError(
                    f"consumer idle points at {rate:g} msg/s need idle times increasing and "
                    f"factors non-decreasing, got {list(zip(idle, factor, strict=True))}"
                )
        return pts

    @field_validator("delivery")
    @classmethod
    def _some(cls, pts: list[PathPoint]) -> list[PathPoint]:
        if not pts:
            raise ValueError("needs at least one delivery point")
        return pts

    def missing(self) -> str | None:
        """What this client path lacks that a current calibration measures (None: nothing):
        a cached profile that lacks something is measured again."""
        if self.protocol < PROTOCOL:
            return (f"calibration revision {PROTOCOL} (persistent deliveries at every load "
                    "level, STOMP without Nagle's delay, the client CPU split by where it "
                    "is spent, confirmed deliveries, follow-ups, the turnaround of a "
                    "prefetch-1 consumer, the gap between fanned-out copies, the wake-up of an "
                    "idle machine, the delivery by the consumer's idle time, the delay of a "
                    "fanned-out message per extra queue, a primed first phase, a quiet load "
                    "level)")  # fmt: skip
        if self.cpu_per_op is None:
            return "the Locust process's CPU per operation"
        if not self.confirm:
            return "the confirm table of persistent messages"
        if self.proxy_hop is None:
            return "the fault proxy's hop"
        return None

    def delivery_table(
        self,
        rate: float,
        size: float,
        persistent: bool,
        slope: float,
        confirms: bool = False,
        follow_up: bool = False,
    ) -> QuantileTable:
        """The delivery delay at total ``rate`` msg/s for ``size`` bytes (see module doc).

        ``slope`` (s/byte) extends the table beyond the largest or below the smallest size.
        The points of the message's own kind are used where the profile has them: confirmed
        ones (of its persistence) for a message whose producer waits for confirms, follow-up
        ones for a follow-up; else the plain points of its persistence, else any.
        """
        pts = self._points(persistent, confirms and not follow_up, follow_up)
        sizes = sorted({p.size for p in pts})
        per_size = [_by_rate([(p.rate, p.table) for p in pts if p.size == s], rate) for s in sizes]
        if size <= sizes[0]:
            return per_size[0].shifted(slope * (size - sizes[0]))
        if size >= sizes[-1]:
            return per_size[-1].shifted(slope * (size - sizes[-1]))
        for i in range(len(sizes) - 1):
            lo, hi = sizes[i], sizes[i + 1]
            if lo <= size <= hi:
                return mix(per_size[i], per_size[i + 1], (size - lo) / (hi - lo))
        return per_size[-1]  # unreachable: the size lies in one bracket

    def _points(self, persistent: bool, confirms: bool, follow_up: bool) -> list[PathPoint]:
        for want in ((persistent, confirms, follow_up), (persistent, False, False)):
            pts = [p for p in self.delivery if (p.persistent, p.confirms, p.follow_up) == want]
            if pts:
                return pts
        return [p for p in self.delivery if p.persistent == persistent] or self.delivery

    def confirm_table(self, rate: float) -> QuantileTable | None:
        """Publish → confirm of a persistent message at total ``rate`` msg/s (None: not
        measured)."""
        if not self.confirm:
            return None
        return _by_rate([(p.rate, p.table) for p in self.confirm], rate)

    def hold_table(self, rate: float) -> QuantileTable | None:
        if not self.hold:
            return None
        return _by_rate([(p.rate, p.table) for p in self.hold], rate)

    def wake_delay(self, idle: float) -> float:
        """Extra delivery delay (s) of a message published after ``idle`` seconds without
        activity (`wake_delay`)."""
        return wake_delay(self.wake, idle)

    def idle_curve(self, rate: float) -> list[tuple[float, float]]:
        """(idle, factor) points of the delivery to a consumer by its idle time at total
        ``rate`` msg/s (`idle_factor` reads them): the measured curves interpolated in
        log(rate), clamped outside the measured rates; empty when not measured."""
        return idle_curve(self.consumer_idle, rate)

    def turnaround_table(self, rate: float) -> QuantileTable | None:
        """Ack → start of a message that waited at the broker (None: not measured)."""
        if not self.turnaround:
            return None
        return _by_rate([(p.rate, p.table) for p in self.turnaround], rate)


def wake_delay(points: list[WakePoint], idle: float) -> float:
    """The extra delay of wake-up ``points`` after ``idle`` s without activity: 0 up to
    ``WAKE_AWAKE`` (and for no points), then linear between the points, flat after the last."""
    if not points or idle <= WAKE_AWAKE:
        return 0.0
    x0, y0 = WAKE_AWAKE, 0.0
    for p in points:
        if idle <= p.idle:
            return y0 + (p.extra - y0) * (idle - x0) / (p.idle - x0)  # (validated: >)
        x0, y0 = p.idle, p.extra
    return y0


def _by_rate(points: list[tuple[float, QuantileTable]], rate: float) -> QuantileTable:
    """Interpolate in log(rate) between the measured rates; clamp outside them."""
    points = sorted(points, key=lambda x: x[0])
    if len(points) == 1 or rate <= points[0][0]:
        return points[0][1]
    if rate >= points[-1][0]:
        return points[-1][1]
    for (r0, t0), (r1, t1) in zip(points, points[1:], strict=False):
        if r0 <= rate <= r1:
            if r1 == r0:
                return t0
            return mix(t0, t1, math.log(rate / r0) / math.log(r1 / r0))
    return points[-1][1]
