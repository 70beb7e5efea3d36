"""From calibration measurements to a `Profile` (docs/models.md §9); its files are written by
`testbed.calibration.profile_files`, the comments on its fields by
`testbed.calibration.derivation_comments`.

The machine calibration runs on is shared: other work stalls clients and broker now and then
for tens to hundreds of ms. Those stalls dominate the *means* of a 40-message point, so the
latency regressions use per-point **medians** (the broker path), and the latency ``sd`` a
spread measure the far tail does not dominate; the sidecar keeps means, sd, p95, p99 and the
mean-based fits alongside. How each profile field is derived (and used by
`emulator.sim.costs`):

- ``latency.<config>.<low_load|high_load>``: least squares a + b·size over the per-point
  median latencies (a point = one size and one repeat) of that configuration and load. Left
  out: saturated points (losses, producer behind schedule, latency growing through the point,
  a backlog that stays: `points.BACKLOG_IN_FLIGHT`) and high-load points whose offered load
  is above `MAX_RHO` of the measured queue capacity (the simulator adds queueing on top of
  the fit). ``r`` is Pearson's r of (size, median),
  ``r2`` the R² of the reported line; a and b are constrained to ≥ 0 (`fitting.linear_fit`).
  ``sd``: median over the small-size points (≤ 10 × reference size, where the simulator applies
  it) of (p95 − median)/1.645.
- ``prefetch_overhead`` / ``confirm_overhead``: regressions on size of the per-point median
  latency differences prefetch1 − base and confirms − base at low load (the simulator adds
  queueing itself, so the light-load difference is the cost).
- ``persistence``: regression on size of the median write time (publish → confirm)
  persistent − transient, both with confirms, at low load.
- ``write_time``: publish → confirm of transient messages with confirms at low load,
  ``read_time``: receive → ack of the base configuration, ``publish_time``: the publish call
  of the base configuration; each the mean and sd (§9: → ``fit(mean, sd)``) of all messages of
  the small sizes, stalls included.
- ``routing.per_destination``: slope of the per-point median copy latency on the number of
  queues bound to a fanout exchange.
- ``queue_service``: a + b·size over the pipe bursts' per-message times (an upper bound: the
  clients share the machine with the broker), by least squares of the *relative* errors
  (weights 1/t²: the times span 0.1–40 ms and a plain fit would serve only the 1 MB point);
  r and r2 are the weighted ones.
- ``network_delay``: half the median loopback TCP handshake.
- ``threads`` (the `threads` model, §3a): a black box shows neither the thread count nor how a
  message's broker time splits into stages, only the single-queue capacity. Both stages get the
  pipe's per-message time at the reference size as their service (cv 1: exponential), and one
  thread each (``count: {receive: 1, dispatch: 1}``), so one thread per stage reproduces the
  measured capacity; a scenario sets its own per-stage counts (``broker.threads``). The model's
  light-load latency, 2d + receive + dispatch, is then below the measured one (it has no
  delivery residual δ).
- ``memory``: (Δ broker memory / n) − size at the reference size; the base is the memory before.
  ``high_watermark`` is not measured (see `HIGH_WATERMARK`).
"""

from __future__ import annotations

__all__ = ["HIGH_WATERMARK", "Assembly", "assemble", "host_label"]

import math
import os
import platform
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.calibration.bench import MemoryProbe, PipeProbe, PointStats
from testbed.calibration.derivation_comments import derivation_comments
from testbed.calibration.fitting import LineFit, difference_fit, linear_fit, pooled_moments
from testbed.calibration.protocol import CalibrationData, size_label
from testbed.core.broker_kinds import KINDS
from testbed.exceptions import MqbedError

HIGH_WATERMARK = {name: kind.high_watermark for name, kind in KINDS.items()}
"""Not measured by calibration (`KindFacts.high_watermark`): ActiveMQ blocks producers when its
message memory (``memoryUsage``, what the poller reports) reaches the limit; RabbitMQ's watermark
applies to the whole node's memory, base included, so no constant fraction of the limit is right
for every limit — 0.6 is kept from the facts-estimate placeholder."""

CONFIG_ORDER = ("base", "prefetch1", "confirms")
MAX_RHO = 0.5
"""High-load points whose offered load is above this fraction of the measured queue capacity
(rate × queue_service(size)) are left out of the latency fits: the simulator adds queueing on
top of the fitted latency, so the fit must not contain it."""


class CalibrationError(MqbedError):
    """Calibration measured too little to build a profile."""


@dataclass
class Assembly:
    """The profile data plus what the sidecar records about how it was derived."""

    profile: dict[str, Any]
    fits: dict[str, Any] = field(default_factory=dict)
    comments: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def host_label() -> str:
    """``<os><version>-<n>vcpu-<m>gib`` (the placeholders' host naming)."""
    osr = {}
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            k, _, v = line.partition("=")
            osr[k] = v.strip('"')
    except OSError:
        pass
    name = f"{osr.get('ID', platform.system().lower())}{osr.get('VERSION_ID', '')}"
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem = 0.0
    return f"{name}-{os.cpu_count() or 0}vcpu-{round(mem)}gib"


def _small(points: list[PointStats], ref: float) -> list[PointStats]:
    small = [p for p in points if p.size <= 10 * ref]
    return small or points


def _medians(points: list[PointStats], what: str) -> dict[tuple[int, int], float]:
    """(size, repeat) -> the point's median `what` (usable points only)."""
    out = {}
    for p in points:
        s = getattr(p, what)
        if s is not None:
            out[p.key()] = s.median
    return out


def _pooled(points: list[PointStats], what: str) -> tuple[float, float] | None:
    return pooled_moments(
        (s.n, s.mean, s.sd) for s in (getattr(p, what) for p in points) if s is not None
    )


def _robust_sd(points: list[PointStats]) -> float:
    """Median over the points of (p95 − median)/1.645: a normal-equivalent spread of single
    latencies that the co-tenant stalls in the far tail do not dominate."""
    vals = [(p.latency.p95 - p.latency.median) / 1.645 for p in points if p.latency is not None]
    return max(statistics.median(vals), 0.0) if vals else 0.0


def _cost(f: LineFit | None) -> dict[str, Any]:
    if f is None:
        return {"a": 0.0, "b": 0.0}
    return {"a": f.a, "b": f.b, "r": f.r, "r2": _r2(f)}


def _r2(f: LineFit) -> float | None:
    return None if f.r2 is None else min(1.0, max(0.0, f.r2))


def _moment(v: tuple[float, float] | None) -> dict[str, float]:
    return {"mean": 0.0, "sd": 0.0} if v is None else {"mean": max(v[0], 0.0), "sd": v[1]}


def _label(x: PointStats) -> str:
    if x.fanout:
        return f"fanout{x.fanout}/r{x.repeat}"
    return f"{x.config}/{x.load}/{size_label(x.size)}/r{x.repeat}"


def assemble(
    data: CalibrationData, *, host: str | None = None, date: str | None = None
) -> Assembly:
    """The profile (as a dict `Profile` validates) and the derivation record.

    Uses only the per-point summaries (not the single samples), so a sidecar is enough to
    derive the profile again (`testbed.calibration.reassemble`).
    """
    p = data.protocol
    ref = float(p.reference_size)
    asm = Assembly(profile={})
    # queue service first: it decides which high-load points carry queueing
    pipes = [x for x in data.pipes if x.received and math.isfinite(x.per_message)]
    qs = _queue_service(pipes, asm)
    by = _by_config(_usable_points(data, qs, asm))
    d = statistics.median(data.rtts) / 2 if data.rtts else 0.0
    asm.comments["network_delay"] = "half the median loopback TCP handshake"
    latency = _latency_fits(by, {"low": p.low_rate, "high": p.high_rate}, ref, asm)
    pre, con, per = _overhead_fits(by, asm)
    publish, read, write = _small_moments(by, ref, asm)
    route = _routing_fit(data, asm)
    # threads model: both stages serve a message in the pipe's per-message time, one thread each
    s_ref = qs.at(ref) if qs is not None else 0.0
    threads = {
        "count": {"receive": 1, "dispatch": 1},
        "receive": {"mean": s_ref, "sd": s_ref},
        "dispatch": {"mean": s_ref, "sd": s_ref},
    }
    memory, ref_mem = _memory(data, ref, asm)
    asm.profile = {
        "source": "measured",
        "host": host or host_label(),
        "broker": {"kind": data.kind, "version": data.version},
        "date": date or (data.started[:10] if data.started else ""),
        "reference_size": ref,
        "network_delay": d,
        "latency": latency,
        "persistence": _cost(per),
        "confirm_overhead": _cost(con),
        "prefetch_overhead": _cost(pre),
        "routing": {"per_destination": route.b if route is not None else 0.0},
        "publish_time": _moment(publish),
        "write_time": _moment(write),
        "read_time": _moment(read),
        "queue_service": _cost(qs),
        "threads": threads,
        "memory": memory,
    }
    asm.comments.update(derivation_comments(data, route, pipes, ref_mem))
    return asm


def _queue_service(pipes: list[PipeProbe], asm: Assembly) -> LineFit | None:
    """a + b·size over the pipe bursts' per-message times, relative least squares."""
    qs = (
        linear_fit(
            [x.size for x in pipes],
            [x.per_message for x in pipes],
            nonneg=True,
            weights=[1.0 / x.per_message**2 for x in pipes],
        )
        if pipes
        else None
    )
    asm.fits["queue_service"] = qs.to_json() if qs is not None else None
    return qs


def _usable_points(data: CalibrationData, qs: LineFit | None, asm: Assembly) -> list[PointStats]:
    """The points the latency fits use: not saturated, and at high load not above `MAX_RHO`
    of the queue capacity; a note lists the others (and the saturated routing points)."""

    def rho(x: PointStats) -> float:
        return x.rate * qs.at(x.size) if qs is not None else 0.0

    usable: list[PointStats] = []
    dropped: list[str] = []
    for x in data.points:
        if x.latency is None or x.saturated:
            dropped.append(f"{_label(x)} ({x.reason or 'no deliveries'})")
        elif x.load == "high" and rho(x) > MAX_RHO:
            dropped.append(f"{_label(x)} (queue utilisation {rho(x):.2f} > {MAX_RHO:g})")
        else:
            usable.append(x)
    dropped += [f"{_label(x)} ({x.reason})" for x in data.routing if x.saturated]
    if dropped:
        asm.notes.append(
            f"{len(dropped)} point(s) left out of the fits (saturated, or offered load near "
            "the measured queue capacity, whose queueing the simulator adds itself): "
            + "; ".join(dropped)
            + "."
        )
    return usable


_ByConfig = dict[tuple[str, str], list[PointStats]]
"""(configuration, load) -> its usable points."""


def _by_config(usable: list[PointStats]) -> _ByConfig:
    return {
        (c, ld): [x for x in usable if x.config == c and x.load == ld]
        for c in (*CONFIG_ORDER, "confirms_transient")
        for ld in ("low", "high")
    }


def _latency_fits(
    by: _ByConfig, rate: dict[str, float], ref: float, asm: Assembly
) -> dict[str, dict[str, Any]]:
    """Per configuration with both loads usable: the latency lines over per-point medians."""
    latency: dict[str, dict[str, Any]] = {}
    for cfg in CONFIG_ORDER:
        variants = {}
        for ld in ("low", "high"):
            use = by[(cfg, ld)]
            if not use:
                continue
            lats = [x.latency for x in use if x.latency is not None]
            xs = [x.size for x in use if x.latency is not None]
            f = linear_fit(xs, [s.median for s in lats], nonneg=True)
            variants[f"{ld}_load"] = {
                "rate": rate[ld], "a": f.a, "b": f.b, "r": f.r, "r2": _r2(f),
                "sd": _robust_sd(_small(use, ref)),
            }  # fmt: skip
            asm.fits[f"latency.{cfg}.{ld}"] = f.to_json() | {
                "points": len(use),
                "sizes": sorted({x.size for x in use}),
                "on": "per-point median latency",
                "mean_fit": linear_fit(xs, [s.mean for s in lats], nonneg=True).to_json(),
                "pooled_sd_small": (_pooled(_small(use, ref), "latency") or (0.0, 0.0))[1],
            }
        for name, v in variants.items():
            if v["r"] is not None and v["r"] < 0.5:
                asm.notes.append(
                    f"{cfg} {name.replace('_', ' ')}: the median latency is not linear in the "
                    f"size (r = {v['r']:.2f}); see the sidecar's points."
                )
        if len(variants) == 2:
            latency[cfg] = variants
        elif variants:
            asm.notes.append(f"{cfg}: only {list(variants)} usable; configuration left out.")
    if "base" not in latency:
        raise CalibrationError(
            "calibration: the base configuration has no usable latency at low and high load "
            "(see the sidecar's points and their errors)"
        )
    return latency


def _overhead_fits(
    by: _ByConfig, asm: Assembly
) -> tuple[LineFit | None, LineFit | None, LineFit | None]:
    """Prefetch, confirm and persistence costs (low load): regressions of median differences
    on size; the high-load overheads go to the sidecar only."""
    base_lat = _medians(by[("base", "low")], "latency")
    pre = difference_fit(_medians(by[("prefetch1", "low")], "latency"), base_lat)
    con = difference_fit(_medians(by[("confirms", "low")], "latency"), base_lat)
    per = difference_fit(
        _medians(by[("confirms", "low")], "write"),
        _medians(by[("confirms_transient", "low")], "write"),
    )
    for name, fit in (("prefetch_overhead", pre), ("confirm_overhead", con), ("persistence", per)):
        asm.fits[name] = fit.to_json() if fit is not None else None
    for name, minuend, sub in (
        ("prefetch_overhead.high", "prefetch1", "base"),
        ("confirm_overhead.high", "confirms", "base"),
    ):
        hf = difference_fit(
            _medians(by[(minuend, "high")], "latency"), _medians(by[(sub, "high")], "latency")
        )
        asm.fits[name] = hf.to_json() if hf is not None else None
    return pre, con, per


_Moments = tuple[float, float] | None


def _small_moments(by: _ByConfig, ref: float, asm: Assembly) -> tuple[_Moments, _Moments, _Moments]:
    """Publish, read and write time: mean and sd at the small sizes (exact pooling of the
    points' moments); the sidecar gets the median of the point medians."""
    base_all = [*by[("base", "low")], *by[("base", "high")]]
    publish = _pooled(_small(base_all, ref), "publish")
    read = _pooled(_small(base_all, ref), "read")
    write = _pooled(_small(by[("confirms_transient", "low")], ref), "write")
    for name, pts, what in (
        ("publish_time", base_all, "publish"),
        ("read_time", base_all, "read"),
        ("write_time", by[("confirms_transient", "low")], "write"),
    ):
        meds = [getattr(x, what).median for x in _small(pts, ref) if getattr(x, what)]
        asm.fits[name] = {"median_of_point_medians": statistics.median(meds) if meds else None}
    return publish, read, write


def _routing_fit(data: CalibrationData, asm: Assembly) -> LineFit | None:
    """Per-point median copy latency on the number of bound queues (None: < 2 widths)."""
    rpts = [x for x in data.routing if x.latency is not None and not x.saturated]
    route = (
        linear_fit(
            [x.fanout for x in rpts],
            [x.latency.median for x in rpts if x.latency is not None],
            nonneg=True,
        )
        if len({x.fanout for x in rpts}) >= 2
        else None
    )
    asm.fits["routing"] = route.to_json() if route is not None else None
    if route is None:
        asm.notes.append("routing: fewer than two fan-out widths measured; per_destination 0.")
    return route


def _memory(
    data: CalibrationData, ref: float, asm: Assembly
) -> tuple[dict[str, float], MemoryProbe | None]:
    """The profile's memory block (from the probe nearest the reference size) and that probe."""
    mem = [m for m in data.memory if m.n and math.isfinite(m.per_message)]
    ref_mem = min(mem, key=lambda m: abs(m.size - ref)) if mem else None
    memory = {
        "per_message_overhead": max(ref_mem.overhead, 0.0) if ref_mem else 0.0,
        "base_bytes": max(mem[0].before, 0.0) if mem else 0.0,
        "high_watermark": HIGH_WATERMARK.get(data.kind, 1.0),
    }
    if len(mem) > 1:
        asm.notes.append(
            f"memory: the probe at {size_label(int(ref_mem.size)) if ref_mem else '?'} is used; "
            "the others are in the sidecar only."
        )
    if ref_mem is not None and ref_mem.overhead < 0:
        asm.notes.append(
            f"memory: broker memory grew by less than the bodies ({ref_mem.per_message:.0f} B "
            f"per {ref_mem.size} B message); overhead set to 0"
        )
    return memory, ref_mem
