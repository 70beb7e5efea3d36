"""Open-loop arrival schedules (docs/models.md §1), shared by the live producers and the simulator.

Pure functions of an arrival spec and a ``numpy.random.Generator``: no clock, no I/O. A live
producer paces itself against the intended times; the simulator schedules them; both record
the intended time so that lateness (``t_publish - t_intended``) is reported, never hidden.

    it = schedule(arrival, rng, start=0.0, stop=60.0)   # iterator of absolute intended times
    t = next(it)

Times are seconds on the run clock. Every time-varying process (mmpp, ramp, steps, trace) runs
on a local clock whose origin is ``start`` (the producer's start): a ramp starts ramping at
``start``, a step ``at: 10s`` begins 10 s after ``start``, trace offsets are added to ``start``.
Times are non-decreasing and lie in ``[start, stop)``.

- ``poisson(rate)``: exponential gaps.
- ``constant(rate)``: gaps of exactly 1/rate; the first send is at ``start + phase/rate`` with
  ``phase`` uniform in [0, 1) unless given (so several instances do not fire in lockstep).
- ``mmpp(rates, mean_sojourns)``: starts in state 0, stays an exponential sojourn, then moves to
  the next state cyclically (0 → 1 → … → 0); Poisson at the state's rate within a state.
- ``ramp`` and ``steps`` with ``process: poisson``: the non-homogeneous Poisson process with that
  rate function, generated exactly by time-changing a unit-rate Poisson process through the
  inverse cumulative intensity Λ⁻¹ (equivalent in law to thinning, without rejected draws).
  With ``process: constant``: the k-th send at Λ⁻¹(k + phase), i.e. constant spacing in
  "expected-count" time, which is 1/rate(t) spacing where the rate is steady.
  Before the first step the rate is 0; after a ramp's ``over`` it stays at ``to``.
- ``trace``: the offsets of ``arrival.times`` (filled by the scenario loader). With ``loop``,
  the trace repeats with period ``last + mean gap`` (so the seam keeps the trace's spacing).
- ``closed(think_time)``: has no schedule; it is driven by its think time (:func:`think_times`).
"""

from __future__ import annotations

__all__ = ["schedule", "think_times", "RateFunction", "rate_function", "BATCH"]

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from testbed.core.scenario import (
    ClosedArrival,
    ConstantArrival,
    MmppArrival,
    PoissonArrival,
    RampArrival,
    StepsArrival,
    TraceArrival,
)

BATCH = 1024
"""Draws per numpy batch; an iterator advances ``rng`` a batch at a time."""


def schedule(
    arrival: Any,
    rng: np.random.Generator,
    start: float = 0.0,
    stop: float = math.inf,
    *,
    phase: float | None = None,
    batch: int = BATCH,
) -> Iterator[float]:
    """Intended send times of one producer instance, in ``[start, stop)``, non-decreasing.

    ``phase`` (in [0, 1)) fixes the offset of constant-spacing processes; by default it is drawn
    from ``rng``. Raises ``ValueError`` for a closed-loop arrival (use :func:`think_times`) and
    for a trace whose times were never loaded.
    """
    if not (math.isfinite(start) and start >= 0):
        raise ValueError(f"start must be a finite time ≥ 0, got {start!r}")
    if not stop > start:
        return iter(())
    if batch < 1:
        raise ValueError(f"batch must be ≥ 1, got {batch!r}")
    if isinstance(arrival, ClosedArrival):
        raise ValueError(
            "a closed-loop arrival has no open-loop schedule: it sends after each think time "
            "once its previous send completed (use think_times)"
        )
    if isinstance(arrival, PoissonArrival):
        gen = _poisson(float(arrival.rate), rng, start, batch)
    elif isinstance(arrival, ConstantArrival):
        ph = rng.random() if phase is None else _phase(phase)
        gen = _constant(float(arrival.rate), start, ph)
    elif isinstance(arrival, MmppArrival):
        gen = _mmpp(arrival, rng, start, batch)
    elif isinstance(arrival, RampArrival | StepsArrival):
        rf = rate_function(arrival)
        if arrival.process == "poisson":
            gen = rf.times(_unit_poisson(rng, batch), start, batch)
        else:
            ph = rng.random() if phase is None else _phase(phase)
            gen = rf.times(_unit_constant(ph, batch), start, batch)
    elif isinstance(arrival, TraceArrival):
        gen = _trace(arrival, start)
    else:
        raise ValueError(f"unknown arrival kind {getattr(arrival, 'kind', arrival)!r}")
    return _until(gen, stop)


def think_times(arrival: ClosedArrival, rng: np.random.Generator) -> Callable[[], float]:
    """Zero-argument sampler of think times for a closed-loop producer (docs/models.md §1)."""
    if not isinstance(arrival, ClosedArrival):
        raise ValueError(f"think_times needs a closed arrival, got {arrival.kind!r}")
    return arrival.think_time.sampler(rng)


# --- homogeneous processes -------------------------------------------------------------------


def _phase(phase: float) -> float:
    if not 0.0 <= phase < 1.0:
        raise ValueError(f"phase must be in [0, 1), got {phase!r}")
    return phase


def _until(gen: Iterator[float], stop: float) -> Iterator[float]:
    for t in gen:
        if t >= stop:
            return
        yield t


def _poisson(rate: float, rng: np.random.Generator, start: float, batch: int) -> Iterator[float]:
    t = start
    scale = 1.0 / rate
    while True:
        times = t + np.cumsum(rng.exponential(scale, batch))
        yield from times.tolist()
        t = float(times[-1])


def _constant(rate: float, start: float, phase: float) -> Iterator[float]:
    gap = 1.0 / rate
    k = 0
    while True:
        yield start + (k + phase) * gap  # multiply, do not accumulate: no drift
        k += 1


def _mmpp(arr: MmppArrival, rng: np.random.Generator, start: float, batch: int) -> Iterator[float]:
    rates = [float(r) for r in arr.rates]
    sojourns = [float(s) for s in arr.mean_sojourns]
    state = 0
    t = start
    while True:
        end = t + float(rng.exponential(sojourns[state]))
        rate = rates[state]
        if rate > 0:
            # Poisson within the sojourn: memoryless, so restarting the gap at a switch is exact
            while True:
                times = t + np.cumsum(rng.exponential(1.0 / rate, batch))
                inside = times[times < end]
                yield from inside.tolist()
                if len(inside) < batch:
                    break
                t = float(times[-1])
        t = end
        state = (state + 1) % len(rates)


def _trace(arr: TraceArrival, start: float) -> Iterator[float]:
    times = [float(x) for x in arr.times]
    if not times:
        raise ValueError(
            f"trace {arr.file!r} has no loaded times; load the scenario with load_scenario() "
            "(it reads the file) or fill arrival.times"
        )
    if not arr.loop:
        for x in times:
            yield start + x
        return
    gap = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
    period = times[-1] + gap
    if period <= 0:
        raise ValueError(f"trace {arr.file!r} cannot loop: its period is {period:g}s")
    cycle = 0
    while True:
        base = start + cycle * period
        for x in times:
            yield base + x
        cycle += 1


# --- non-homogeneous processes by time change -------------------------------------------------


def _unit_poisson(rng: np.random.Generator, batch: int) -> Iterator[np.ndarray]:
    """Event "counts" of a unit-rate Poisson process, in batches."""
    s = 0.0
    while True:
        x = s + np.cumsum(rng.exponential(1.0, batch))
        yield x
        s = float(x[-1])


def _unit_constant(phase: float, batch: int) -> Iterator[np.ndarray]:
    k = 0
    while True:
        yield k + phase + np.arange(batch, dtype=float)
        k += batch


@dataclass(frozen=True)
class RateFunction:
    """A piecewise-linear rate r(τ) on the local clock τ ≥ 0 with knots ``(knots[i], rates[i])``.

    A jump is two knots at the same τ. After the last knot the rate stays ``rates[-1]``.
    ``cumulative[i]`` is Λ(knots[i]) = ∫₀^knot r.
    """

    knots: tuple[float, ...]
    rates: tuple[float, ...]
    cumulative: tuple[float, ...]

    def rate(self, tau: float) -> float:
        k, r = self.knots, self.rates
        if tau >= k[-1]:
            return r[-1]
        i = int(np.searchsorted(k, tau, side="right")) - 1
        if i < 0:
            return 0.0
        span = k[i + 1] - k[i]
        return r[i] if span == 0 else r[i] + (r[i + 1] - r[i]) * (tau - k[i]) / span

    def inverse(self, x: np.ndarray) -> np.ndarray:
        """Λ⁻¹(x) for non-decreasing x ≥ 0 (inf where the rate is 0 for ever after)."""
        knots = np.asarray(self.knots)
        rates = np.asarray(self.rates)
        cum = np.asarray(self.cumulative)
        i = np.searchsorted(cum, x, side="right") - 1
        out = np.empty_like(x)
        tail = i >= len(knots) - 1
        if tail.any():
            r_end = rates[-1]
            extra = x[tail] - cum[-1]
            out[tail] = knots[-1] + (extra / r_end if r_end > 0 else np.inf)
        body = ~tail
        if body.any():
            j = i[body]
            span = knots[j + 1] - knots[j]
            r0 = rates[j]
            slope = np.divide(rates[j + 1] - r0, span, out=np.zeros_like(span), where=span > 0)
            delta = x[body] - cum[j]
            # root of slope/2·τ² + r0·τ − delta = 0 in the stable form 2δ/(r0 + √(r0² + 2sδ))
            disc = np.sqrt(np.maximum(r0 * r0 + 2.0 * slope * delta, 0.0))
            denom = r0 + disc
            tau = np.divide(2.0 * delta, denom, out=np.zeros_like(delta), where=denom > 0)
            out[body] = knots[j] + tau
        return out

    def times(self, counts: Iterator[np.ndarray], start: float, batch: int) -> Iterator[float]:
        for x in counts:
            t = self.inverse(x)
            finite = t[np.isfinite(t)]
            yield from (start + finite).tolist()
            if len(finite) < len(t):
                return


def rate_function(arrival: RampArrival | StepsArrival) -> RateFunction:
    """The rate function of a ramp or steps arrival (local clock: 0 = the producer's start)."""
    if isinstance(arrival, RampArrival):
        knots = [0.0, float(arrival.over)]
        rates = [float(arrival.from_), float(arrival.to)]
    else:
        knots, rates = [], []
        first = arrival.steps[0]
        if first.at > 0:
            knots += [0.0, float(first.at)]
            rates += [0.0, 0.0]
        prev_rate: float | None = None
        for step in arrival.steps:
            if prev_rate is not None:
                knots.append(float(step.at))
                rates.append(prev_rate)
            knots.append(float(step.at))
            rates.append(float(step.rate))
            prev_rate = float(step.rate)
    cum = [0.0]
    for i in range(1, len(knots)):
        cum.append(cum[-1] + (knots[i] - knots[i - 1]) * (rates[i] + rates[i - 1]) / 2.0)
    return RateFunction(tuple(knots), tuple(rates), tuple(cum))
