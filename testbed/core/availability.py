"""Broker availability: the start-up time a killed or restarted broker needs, and the fraction
of a window a target was up according to a run's ``broker_down``/``broker_up`` events.

One definition for the simulator (`emulator.sim.faults` keeps the broker down for the outage
plus `restart_seconds`), the closed-form QoS inputs (`testbed.analysis.qos`) and the measured
and simulated availability figures computed from the events of either side.
"""

from __future__ import annotations

__all__ = [
    "RESTART_S",
    "ack_loss_seconds",
    "availability_from_events",
    "kill_teardown_seconds",
    "restart_seconds",
]

from typing import TYPE_CHECKING, Any

from testbed.core.broker_kinds import KINDS

if TYPE_CHECKING:
    from testbed.core.profile import Profile

RESTART_S = {name: kind.restart_s for name, kind in KINDS.items()}
"""Broker start-up time after a kill or restart per kind (`KindFacts.restart_s`) when the
profile has no measured ``restart_time`` (RabbitMQ ~5–8 s with persistent data on a quiet
machine, up to 18 s on a busy one; ActiveMQ ~1–3 s); added to the scenario's ``duration`` of
the outage."""
DEFAULT_RESTART_S = 6.0
"""For a broker kind without a figure of its own."""


def restart_seconds(kind: str, profile: Profile | None = None) -> float:
    """Start-up time of broker ``kind`` after a kill or restart: the profile's measured
    ``restart_time`` when it has one, else the constant of `RESTART_S`."""
    if profile is not None and profile.restart_time is not None:
        return float(profile.restart_time.mean)
    return RESTART_S.get(kind, DEFAULT_RESTART_S)


def ack_loss_seconds(kind: str, profile: Profile | None = None) -> float:
    """Seconds of consumers' acks of persistent messages a kill of broker ``kind`` forgets:
    the profile's measured ``restart_time.ack_loss_s`` when it has one, else the kind's
    figure (`KindFacts.ack_loss_s`)."""
    rt = profile.restart_time if profile is not None else None
    if rt is not None and rt.ack_loss_s is not None:
        return float(rt.ack_loss_s)
    facts = KINDS.get(kind)
    return facts.ack_loss_s if facts is not None else 0.0


def kill_teardown_seconds(kind: str, profile: Profile | None = None) -> float:
    """Seconds from a kill of broker ``kind`` until its process is gone and its connections
    close: the profile's measured ``restart_time.kill_s`` when it has one, else the kind's
    figure (`KindFacts.kill_s`). Clients learn of the kill only then."""
    rt = profile.restart_time if profile is not None else None
    if rt is not None and rt.kill_s is not None:
        return float(rt.kill_s)
    facts = KINDS.get(kind)
    return facts.kill_s if facts is not None else 0.0


def availability_from_events(
    events: Any, start: float, end: float, target: str = "broker"
) -> float:
    """Fraction of ``[start, end]`` the target was up, from ``broker_down``/``broker_up`` rows
    (a pandas frame with ``t``, ``kind``, ``target``)."""
    ev = events[(events.target == target) & events.kind.isin(["broker_down", "broker_up"])]
    down, since = 0.0, None
    for row in ev.sort_values("t").itertuples():
        if row.kind == "broker_down" and since is None:
            since = max(float(row.t), start)
        elif row.kind == "broker_up" and since is not None:
            down += max(0.0, min(float(row.t), end) - since)
            since = None
    if since is not None:
        down += max(0.0, end - since)
    return 1.0 - down / (end - start) if end > start else 1.0
