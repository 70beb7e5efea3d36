"""One calibration point: a stream's observations reduced to summaries and a saturation
verdict (the input of `testbed.calibration.assemble`)."""

from __future__ import annotations

__all__ = ["BACKLOG_IN_FLIGHT", "LOSS_TOLERANCE", "PointStats", "point_stats"]

import statistics
from dataclasses import dataclass, field
from typing import Any

from testbed.calibration.fitting import Summary, summarize
from testbed.calibration.streams import StreamRecord

LOSS_TOLERANCE = 0.01
"""A point with more than this fraction of measured messages undelivered is saturated."""

BACKLOG_IN_FLIGHT = 2.0
"""A point whose messages were on average more than this many in flight at once (Little's law:
target rate × median latency) is saturated. An M/M/1 queue at the latency fits' utilisation
limit (`assemble.MAX_RHO` = 0.5) holds ρ/(1 − ρ) = 1 message on average; a backlog that built
up during the warm-up and then neither grows nor drains (a queue near its capacity) passes the
trend test. Seen: a 100 kB ActiveMQ point at 100 msg/s with a flat 394 ms median (39 in
flight) in a CI run on 2026-12-02, which pulled the size fit's intercept to 0, and a 1 MB
RabbitMQ point with a 404 ms median in the shipped sidecar. The light points of the shipped
sidecars hold at most 1.3."""


@dataclass
class PointStats:
    """One measured point (one stream) reduced to summaries; samples kept for pooling."""

    config: str
    load: str
    rate: float
    size: int
    repeat: int
    fanout: int
    sent: int
    expected: int
    received: int
    achieved_rate: float
    max_lateness: float
    latency: Summary | None
    write: Summary | None
    read: Summary | None
    publish: Summary | None
    saturated: bool
    reason: str
    errors: list[str]
    samples: dict[str, list[float]] = field(default_factory=dict, repr=False)

    def key(self) -> tuple[int, int]:
        return (self.size, self.repeat)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "config", "load", "rate", "size", "repeat", "fanout", "sent", "expected",
                "received", "achieved_rate", "max_lateness", "saturated", "reason", "errors",
            )
        }  # fmt: skip
        for k in ("latency", "write", "read", "publish"):
            s = getattr(self, k)
            out[k] = s.to_json() if s is not None else None
        return out


def _trend_ratio(lat_by_index: list[tuple[int, float]]) -> float:
    """The fastest latency of the last quarter (by publish order) over the median of the
    first quarter. A backlog delays every message behind it, so the last quarter's fastest is
    late too; one stalled message — a 68 ms write stall in a 2 s light-load point of ten
    messages, seen in a CI run on 2026-11-29 — moves only itself (its quarter's *median*, two
    messages there, took it and called a light load saturated)."""
    if len(lat_by_index) < 8:
        return 1.0
    ordered = [v for _, v in sorted(lat_by_index)]
    q = len(ordered) // 4
    first = statistics.median(ordered[:q])
    last = min(ordered[-q:])
    return last / first if first > 0 else 1.0


def point_stats(rec: StreamRecord) -> PointStats:
    """Reduce one stream to its point: measured (post-warm-up) samples, summaries, saturation.

    Saturated (excluded from the latency fits, kept in the sidecar): more than 1 % of the
    measured copies undelivered, an achieved publish rate below 90 % of the target, or a
    latency that grows through the point (every delivery of the last quarter over 3 × the
    first quarter's median, with a median over 1 ms: a backlog building up), or more than
    `BACKLOG_IN_FLIGHT` messages in flight on average (a backlog that stays).
    """
    s = rec.spec
    nq = len(s.queues())
    warm = s.n_warm
    sent = {i: v for i, v in rec.sent.items() if i >= warm}
    got = [x for x in rec.received if x[0] >= warm]
    lat = [x[2] / 1e9 for x in got]
    read = [x[3] / 1e9 for x in got]
    write = [v / 1e9 for i, v in rec.write.items() if i >= warm]
    pub = [v[1] / 1e9 for v in sent.values()]
    expected = len(sent) * nq
    times = sorted(v[0] for v in rec.sent.values())
    achieved = (len(times) - 1) / ((times[-1] - times[0]) / 1e9) if len(times) > 2 else s.rate
    max_late = max((v[2] for v in rec.sent.values()), default=0.0)
    reasons = [rec.stopped] if rec.stopped else []
    if expected and (expected - len(got)) > LOSS_TOLERANCE * expected:
        reasons.append(f"{expected - len(got)} of {expected} not delivered")
    if len(times) >= 10 and achieved < 0.9 * s.rate:
        reasons.append(f"publish rate {achieved:.3g}/s < 90 % of {s.rate:g}/s")
    ratio = _trend_ratio([(x[0], x[2] / 1e9) for x in got])
    if ratio > 3.0 and lat and statistics.median(lat) > 1e-3:
        reasons.append(f"latency grows through the point (x{ratio:.1f}: backlog)")
    in_flight = s.rate * statistics.median(lat) if lat else 0.0
    if in_flight > BACKLOG_IN_FLIGHT:
        reasons.append(f"{in_flight:.1f} messages in flight on average (backlog)")
    if not got:
        reasons.append("no deliveries")
    return PointStats(
        config=s.config,
        load=s.load,
        rate=s.rate,
        size=s.size,
        repeat=s.repeat,
        fanout=s.fanout,
        sent=len(sent),
        expected=expected,
        received=len(got),
        achieved_rate=achieved,
        max_lateness=max_late,
        latency=summarize(lat),
        write=summarize(write),
        read=summarize(read),
        publish=summarize(pub),
        saturated=bool(reasons),
        reason="; ".join(reasons),
        errors=list(rec.errors),
        samples={"latency": lat, "write": write, "read": read, "publish": pub},
    )
