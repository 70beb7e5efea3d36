"""Consumer-count policies (docs/models.md §8): target tracking (HPA / KEDA) and step/threshold.

Both answer "how many consumers" from an :class:`Observation` and the current count (running +
starting, HPA's ``spec.replicas``); *when* each new one takes messages is the
:class:`~testbed.core.policies.provisioning.Provisioner`'s business.

Metrics (``metric_value``):

- ``queue_length``: (ready + unacked) per consumer — KEDA's RabbitMQ ``queueLength``, so
  target tracking gives desired = ceil(total / target);
- ``publish_rate``: publish rate per consumer (msg/s);
- ``drain_time``: expected drain time N / (μ − λ) with μ = current × capacity (s);
  infinite when μ ≤ λ and messages wait (desired jumps to max);
- ``rate_ratio`` (step only): λ / (current × capacity), production over consumption capacity.

Target tracking follows the HPA controller: desired = ceil(current × metric / target), no change
while |metric/target − 1| ≤ tolerance, 0 → 1 activation (KEDA), clamp to [min, max], then the
stabilisation windows over the recommendations of the last window seconds: scale up only to
the *smallest* recommendation of the up-window, scale down only to the *largest* of the
down-window (``stabilizeRecommendationWithBehaviors``). Step scaling adds/removes `step`
consumers when the per-consumer load leaves [min_load, max_load], with AWS-style cool-downs
(no scale-up within the up-window of the last scale-up, no scale-down within the down-window
of the last change).
"""

from __future__ import annotations

__all__ = ["Recommendation", "StepPolicy", "TargetTrackingPolicy", "metric_value"]

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from testbed.core.policies.observation import Observation
from testbed.core.policies.sizing import hpa_desired

METRICS = ("queue_length", "publish_rate", "drain_time", "rate_ratio")


def metric_value(metric: str, obs: Observation, current: int, capacity: float | None) -> float:
    """The policy metric from one observation (see the module docstring for each)."""
    per = max(current, 1)
    if metric == "queue_length":
        return obs.length / per
    if metric == "publish_rate":
        return obs.publish_rate / per
    if metric in ("drain_time", "rate_ratio"):
        if capacity is None or capacity <= 0:
            raise ValueError(
                f"metric {metric!r} needs the consumer capacity (msg/s), got {capacity!r}"
            )
        mu = current * capacity
        if metric == "rate_ratio":
            return obs.publish_rate / mu if mu > 0 else (math.inf if obs.publish_rate > 0 else 0.0)
        if obs.length == 0:
            return 0.0
        return obs.length / (mu - obs.publish_rate) if mu > obs.publish_rate else math.inf
    raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")


@dataclass(frozen=True)
class Recommendation:
    """A policy's answer: `desired` consumers, with the inputs that led there."""

    desired: int
    reason: str
    metric: str
    value: float
    raw: int
    """Before stabilisation / cool-down (after min/max)."""

    def inputs(self) -> dict[str, Any]:
        v = self.value if math.isfinite(self.value) else "inf"
        return {
            "metric": self.metric,
            "value": v if isinstance(v, str) else round(v, 6),
            "raw": self.raw,
        }


def _clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


class TargetTrackingPolicy:
    """Kubernetes HPA / KEDA target tracking with stabilisation windows."""

    def __init__(
        self,
        target_value: float,
        *,
        metric: str = "queue_length",
        tolerance: float = 0.1,
        min_replicas: int = 1,
        max_replicas: int = 10,
        scale_up_window: float = 0.0,
        scale_down_window: float = 300.0,
        capacity: float | None = None,
    ) -> None:
        if target_value <= 0:
            raise ValueError(f"target_value must be > 0, got {target_value!r}")
        if metric not in METRICS[:3]:
            raise ValueError(f"target tracking metric {metric!r} not in {METRICS[:3]}")
        if not 0 <= min_replicas <= max_replicas:
            raise ValueError(
                f"need 0 <= min_replicas ({min_replicas}) <= max_replicas ({max_replicas})"
            )
        self.target_value = float(target_value)
        self.metric = metric
        self.tolerance = float(tolerance)
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.up_window = float(scale_up_window)
        self.down_window = float(scale_down_window)
        self.capacity = capacity
        self._recs: deque[tuple[float, int]] = deque()

    def raw_desired(self, value: float, current: int) -> tuple[int, str]:
        """HPA's formula before min/max and stabilisation: (replicas, reason)."""
        if current == 0:
            return (1, "activate") if value > 0 else (0, "idle")
        if math.isinf(value):
            return self.max_replicas, "unbounded_metric"
        n = hpa_desired(current, value, self.target_value, self.tolerance)
        if n == current:
            return n, "within_tolerance"
        return n, "above_target" if n > current else "below_target"

    def recommend(self, obs: Observation, current: int, now: float) -> Recommendation:
        value = metric_value(self.metric, obs, current, self.capacity)
        raw, reason = self.raw_desired(value, current)
        raw = _clamp(raw, self.min_replicas, self.max_replicas)
        self._recs.append((now, raw))
        horizon = now - max(self.up_window, self.down_window)
        while self._recs and self._recs[0][0] < horizon:
            self._recs.popleft()
        up = min(r for t, r in self._recs if t >= now - self.up_window)
        down = max(r for t, r in self._recs if t >= now - self.down_window)
        desired = current
        if desired < up:
            desired = up
        if desired > down:
            desired = down
        desired = _clamp(desired, self.min_replicas, self.max_replicas)
        if desired != raw and reason not in ("within_tolerance",):
            reason = f"{reason}, stabilised"
        return Recommendation(desired, reason, self.metric, value, raw)


class StepPolicy:
    """Threshold policy: ±`step` consumers outside [min_load, max_load], with cool-downs."""

    def __init__(
        self,
        *,
        min_load: float,
        max_load: float,
        metric: str = "queue_length",
        step: int = 1,
        min_replicas: int = 1,
        max_replicas: int = 10,
        scale_up_cooldown: float = 0.0,
        scale_down_cooldown: float = 30.0,
        capacity: float | None = None,
    ) -> None:
        if not 0 <= min_load < max_load:
            raise ValueError(f"need 0 <= min_load ({min_load}) < max_load ({max_load})")
        if metric not in ("queue_length", "publish_rate", "rate_ratio"):
            raise ValueError(
                f"step metric {metric!r} not in queue_length, publish_rate, rate_ratio"
            )
        self.min_load = min_load
        self.max_load = max_load
        self.metric = metric
        self.step = step
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.up_cooldown = scale_up_cooldown
        self.down_cooldown = scale_down_cooldown
        self.capacity = capacity
        self._last_up = -math.inf
        self._last_change = -math.inf

    def recommend(self, obs: Observation, current: int, now: float) -> Recommendation:
        load = metric_value(self.metric, obs, current, self.capacity)
        if load > self.max_load:
            raw, reason = current + self.step, "above_max_load"
        elif load < self.min_load:
            raw, reason = current - self.step, "below_min_load"
        else:
            raw, reason = current, "within_band"
        raw = _clamp(raw, self.min_replicas, self.max_replicas)
        desired = raw
        up_blocked = raw > current and now - self._last_up < self.up_cooldown
        down_blocked = raw < current and now - self._last_change < self.down_cooldown
        if up_blocked or down_blocked:
            desired, reason = current, f"{reason}, cooling_down"
        if desired > current:
            self._last_up = self._last_change = now
        elif desired < current:
            self._last_change = now
        return Recommendation(desired, reason, self.metric, load, raw)
