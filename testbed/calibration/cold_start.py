"""A freshly restarted broker's slow first seconds: the profile's ``restart_time.cold``
(docs/models.md §6).

A broker that was killed and started again delivers slowly for a while after it is healthy:
its process starts cold (ActiveMQ's JVM interprets its code until the JIT has compiled the hot
paths, and compiles while it serves). Measured on 2026-11-29, ActiveMQ 5.17 native on this
machine class, a 50 msg/s persistent confirmed 1 KB stream: per-second medians 2.14, 1.85, 1.71,
1.56, 1.55, 1.39, 1.37, 1.30, 1.19 ms after the restart, 1.1-1.2 ms from the tenth second on
and 1.0-1.1 ms before the kill; the live runs show the same (broker kill under PCM: a p50 of
1.68 ms in the first 3 s after the clients are back, 0.91 ms before the kill). A run with
stochastic kills spends a good share of its deliveries in these seconds.

So right after each of the calibration's restarts (`testbed.calibration.restart`) a stream of
the broker-kill scenario's shape (`RATE` msg/s, persistent, confirmed, 1 KB) runs for
`STREAM_S`, timed from the moment the broker was healthy. Its last `STEADY_S` are the
reference; the excess of the seconds before over it, binned by `BIN_S` (bin medians: one
stalled message moves nothing) and pooled over the restarts, is fitted as
``extra · exp(-t / tau)`` by least squares (``extra`` in closed form for each ``tau`` of a
grid), the reference's own share of the decay taken into account. The simulator adds
``extra · exp(-t / tau)`` to every publish ``t`` seconds after a simulated ``broker_up``
(`emulator.sim.broker`).

Hand-written because no library measures a broker's warm-up; it uses the calibration's stream
benchmark (`testbed.calibration.streams`), so the messages take the path a run's take.
"""

from __future__ import annotations

__all__ = ["RATE", "STEADY_S", "STREAM_S", "Sample", "cold_stream", "fit_cold"]

import math
import statistics
import threading
from collections.abc import Sequence

from testbed.backends.base import BrokerEndpoint
from testbed.calibration.streams import StreamSpec, run_group
from testbed.core.profile import ColdStart

RATE = 50.0
"""msg/s of the stream after a restart (the QoS PCM scenario's rate)."""
STREAM_S = 14.0
"""Seconds of that stream."""
STEADY_S = 4.0
"""Its last seconds: the broker is warm again (the reference)."""
BIN_S = 0.5
"""Width of the time bins whose medians are fitted (s)."""

Sample = tuple[float, float]
"""(seconds after the broker was healthy, delivery latency s) of one message."""


def cold_stream(endpoint: BrokerEndpoint, healthy_ns: int, tag: str) -> list[Sample]:
    """Run the stream on `endpoint` now; its deliveries timed from `healthy_ns`
    (``time.time_ns()`` when the broker was healthy again). Bounded as every stream is."""
    spec = StreamSpec(
        tag=tag, config="confirms", load="low", size=1024, rate=RATE, warmup=0.0,
        duration=STREAM_S, persistent=True, confirms=True, prefetch=10,
    )  # fmt: skip
    (rec,) = run_group(endpoint, [spec], abort=threading.Event(), drain_limit=10.0)
    out: list[Sample] = []
    for i, _q, latency_ns, _read in rec.received:
        sent = rec.sent.get(i)
        if sent is not None:
            out.append(((sent[0] - healthy_ns) / 1e9, latency_ns / 1e9))
    return out


def _excess(samples: Sequence[Sample]) -> tuple[list[Sample], float]:
    """One stream's latencies before its steady tail less that tail's median, and when the
    tail begins (s after healthy)."""
    if not samples:
        return [], 0.0
    steady_from = max(t for t, _ in samples) - STEADY_S
    steady = [x for t, x in samples if t >= steady_from]
    if len(steady) < 10:
        return [], 0.0
    ref = statistics.median(steady)
    return [(t, x - ref) for t, x in samples if t < steady_from], steady_from


TAUS = tuple(round(0.25 * 1.1**k, 3) for k in range(40))
"""Decay times tried (0.25 s to 10 s, 10 % apart)."""


def fit_cold(streams: Sequence[Sequence[Sample]], rate: float = RATE) -> ColdStart | None:
    """``extra · exp(-t / tau)`` fitted to the streams' excess over their steady tails (see
    the module docstring); extra 0 when there is none; None without enough deliveries."""
    pooled: list[Sample] = []
    tails: list[float] = []
    for run in streams:
        excess, steady_from = _excess(run)
        pooled += excess
        tails += [steady_from] if excess else []
    if len(pooled) < 20:
        return None
    bins: dict[int, list[float]] = {}
    for t, x in pooled:
        bins.setdefault(int(t / BIN_S), []).append(x)
    points = [((k + 0.5) * BIN_S, statistics.median(v)) for k, v in bins.items() if len(v) >= 3]
    steady_from = statistics.fmean(tails)
    best: tuple[float, float, float] | None = None  # (squared error, extra, tau)
    for tau in TAUS:
        # the tail is the reference, so the model is extra · (e^-t/tau − its mean over the tail)
        tail = (
            tau
            / STEADY_S
            * (math.exp(-steady_from / tau) - math.exp(-(steady_from + STEADY_S) / tau))
        )
        shape = [math.exp(-t / tau) - tail for t, _ in points]
        norm = sum(f * f for f in shape)
        if norm <= 0.0:
            continue
        extra = max(sum(f * y for f, (_, y) in zip(shape, points, strict=True)) / norm, 0.0)
        err = sum((y - extra * f) ** 2 for f, (_, y) in zip(shape, points, strict=True))
        if best is None or err < best[0]:
            best = (err, extra, tau)
    if best is None or best[1] <= 0.0:
        return ColdStart(extra_s=0.0, tau_s=TAUS[0], rate=rate)
    return ColdStart(extra_s=round(best[1], 6), tau_s=round(best[2], 3), rate=rate)
