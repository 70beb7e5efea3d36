"""The delivery to a consumer by its own idle time (docs/models.md §9a, calibration revision 7).

A message reaches a consumer that finished its previous message a few milliseconds before the
publish sooner than one that has been idle: calibration measures by how much, per load level
(`testbed.calibration.consumer_idle`), and stores its delivery tables for a *cold* consumer;
the simulator scales each table draw by the factor of the consumer's idle time
(`idle_scaler`). The points live in ``ClientPath.consumer_idle``.
"""

from __future__ import annotations

__all__ = ["IDLE_COLD", "IdlePoint", "idle_curve", "idle_factor", "idle_scaler"]

import math
from bisect import bisect_right
from collections.abc import Callable

import numpy as np
from pydantic import Field

from testbed.core.strict import Strict

IDLE_COLD = 0.02
"""A consumer that finished its previous message this long (s) or longer before a message was
published is *cold*: the delivery tables hold that delivery, and ``consumer_idle`` scales it
for a consumer that was busy more recently. Measured per idle bin, a calibration's deliveries
were flat above 20 ms (ActiveMQ 0.51-0.55 ms, RabbitMQ 0.75-0.78 ms for 20-300 ms) and fell
below it (0.33 and 0.56 ms within 2 ms)."""


class IdlePoint(Strict):
    """At total ``rate`` msg/s, a message published ``idle`` seconds after its consumer
    finished its previous one took ``factor`` times as long to reach it as one to a cold
    consumer (median, other things equal)."""

    rate: float = Field(gt=0)
    idle: float = Field(ge=0, lt=IDLE_COLD)
    factor: float = Field(gt=0, le=1)
    n: int = Field(ge=0)
    """Deliveries in the idle bin the point summarises."""


def idle_curve(points: list[IdlePoint], rate: float) -> list[tuple[float, float]]:
    """``ClientPath.idle_curve`` of ``points``: the curve of each measured rate, mixed between
    the two rates around ``rate`` on the union of their idle times (two piecewise-linear curves
    mix exactly there)."""
    rates = sorted({p.rate for p in points})
    if not rates:
        return []
    curves = {r: [(p.idle, p.factor) for p in points if p.rate == r] for r in rates}
    if rate <= rates[0] or len(rates) == 1:
        return curves[rates[0]]
    if rate >= rates[-1]:
        return curves[rates[-1]]
    hi = next(i for i, r in enumerate(rates) if r >= rate)
    r0, r1 = rates[hi - 1], rates[hi]
    w = math.log(rate / r0) / math.log(r1 / r0)
    grid = sorted({x for x, _ in curves[r0]} | {x for x, _ in curves[r1]})
    return [
        (x, float((1 - w) * idle_factor(curves[r0], x) + w * idle_factor(curves[r1], x)))
        for x in grid
    ]


def idle_factor(curve: list[tuple[float, float]], idle: float) -> float:
    """The factor of an (idle, factor) ``curve`` at ``idle`` s: the first point's below it (a
    negative idle — the consumer still busy — included), linear between points and on to 1 at
    ``IDLE_COLD``, 1 from there on (and for no points). ``numpy.interp`` clamps at both ends,
    which is exactly that rule; an array of idle times gives an array of factors."""
    if not curve:
        return 1.0
    xs = [x for x, _ in curve] + [IDLE_COLD]
    ys = [y for _, y in curve] + [1.0]
    return np.interp(idle, xs, ys)  # type: ignore[no-any-return]


def idle_scaler(curve: list[tuple[float, float]]) -> Callable[[float], float] | None:
    """`idle_factor` of ``curve`` as a function of one idle time (None: no curve, nothing to
    scale), written with ``bisect`` over plain lists: the simulator calls it once per delivery,
    where ``numpy.interp`` on one value costs several microseconds."""
    if not curve:
        return None
    xs = [x for x, _ in curve] + [IDLE_COLD]
    ys = [y for _, y in curve] + [1.0]
    x0, y0 = xs[0], ys[0]

    def scale(idle: float) -> float:
        if idle >= IDLE_COLD:
            return 1.0
        if idle <= x0:
            return y0
        i = bisect_right(xs, idle)
        xa, ya = xs[i - 1], ys[i - 1]
        return ya + (ys[i] - ya) * (idle - xa) / (xs[i] - xa)

    return scale
