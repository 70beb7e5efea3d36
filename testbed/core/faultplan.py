"""Pure fault planning: the one timeline of a scenario's ``faults:`` that the live side and the
simulator both execute (seeded; same seed, same episodes).

- `plan_faults`: broker and network faults → the `Episode`s the live `FaultRunner`
  (`testbed.faults.timeline`) and the simulator (`emulator.sim.faults`) execute;
- `plan_crashes`: client crashes and consumer-group stochastic faults → the `CrashPlan`s the
  workload processes (`testbed.workload.crashes`) and the simulator execute;
- `stochastic_schedule`: failure/repair times of a `StochasticFault` (exponential MTTF/MTTR);
- `network_toxics`: a `NetworkFault` as Toxiproxy toxics in Toxiproxy's units;
- `episode_detail`: the detail every ``fault_start``/``fault_end`` row of an episode carries;
- `needs_proxy`: whether the clients connect through the fault proxy for the whole run (live:
  `testbed.replication`; simulated: the proxy's hop on every path, `emulator.sim.faults_net`).

Shared semantics: a fault starts only before `stop_at`, and is healed by `stop_at` at the
latest (``Episode.clipped``). Random streams come from `testbed.core.seeds`.
"""

from __future__ import annotations

__all__ = [
    "CrashPlan",
    "Episode",
    "MAX_EPISODES",
    "BROKER_FAULT_KINDS",
    "episode_detail",
    "is_broker_fault",
    "is_broker_target",
    "needs_proxy",
    "network_toxics",
    "plan_crashes",
    "plan_faults",
    "stochastic_schedule",
]

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from testbed.core.scenario_faults import BrokerFault, ClientFault, StochasticFault
from testbed.core.seeds import crash_rng, stochastic_fault_rng
from testbed.exceptions import FaultError

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario

MAX_EPISODES = 100_000


def needs_proxy(faults: Sequence[Any]) -> bool:
    """Whether any fault is a network fault: the clients then connect through proxy links."""
    return any(getattr(f, "side", None) is not None for f in faults)


def stochastic_schedule(
    fault: Any, rng: np.random.Generator, stop: float
) -> list[tuple[float, float]]:
    """Failure/repair episodes ``[(down_at, up_at), ...]`` of a `StochasticFault`.

    An alternating renewal process starting *up* at ``fault.at``: time to failure ~ Exp(mean
    ``mttf``), time to repair ~ Exp(mean ``mttr``), drawn in that order (ttf, ttr, ttf, ...) from
    `rng`, so the simulator reproduces the live schedule from the same seed. Failures happen
    only before ``min(fault.until, stop)``; the last ``up_at`` may lie after it.
    """
    end = float(stop) if fault.until is None else min(float(fault.until), float(stop))
    if not math.isfinite(end):
        raise FaultError(f"stochastic fault on {fault.target!r}: needs 'until' or a finite stop")
    episodes: list[tuple[float, float]] = []
    t = float(fault.at)
    while True:
        t += float(rng.exponential(fault.mttf))
        if t >= end:
            return episodes
        up = t + float(rng.exponential(fault.mttr))
        episodes.append((t, up))
        if len(episodes) > MAX_EPISODES:
            raise FaultError(
                f"stochastic fault on {fault.target!r}: more than {MAX_EPISODES} failures "
                f"(mttf={fault.mttf:g}s over {end - fault.at:g}s)"
            )
        t = up


def _ms(seconds: float | None, default: float = 0.0) -> float:
    return default if seconds is None else round(seconds * 1e3, 6)


def network_toxics(fault: Any, tag: str) -> list[dict[str, Any]]:
    """Toxiproxy toxics (JSON) for a scenario `NetworkFault`: scenario units (seconds, bytes,
    bytes/s) → Toxiproxy units (ms, bytes, KB/s, µs); one per stream of ``direction``."""
    kind = fault.kind
    attrs: dict[str, Any]
    if kind == "latency":
        attrs = {"latency": _ms(fault.latency), "jitter": _ms(fault.jitter)}
    elif kind == "bandwidth":
        attrs = {"rate": fault.rate / 1e3}
    elif kind == "slow_close":
        attrs = {"delay": _ms(fault.delay)}
    elif kind in ("timeout", "reset_peer"):
        attrs = {"timeout": _ms(fault.timeout)}
    elif kind == "slicer":
        attrs = {
            "average_size": int(fault.average_size),
            "size_variation": int(fault.size_variation or 0),
            "delay": round((fault.delay or 0.0) * 1e6, 3),
        }
    elif kind == "limit_data":
        attrs = {"bytes": int(fault.bytes)}
    elif kind == "partition":
        attrs = {"mode": fault.mode or "blackhole"}
    elif kind == "loss":
        attrs = {
            "probability": fault.probability,
            "retransmit_delay": _ms(fault.retransmit_delay, 200),
        }
    else:
        raise FaultError(f"network fault kind {kind!r}: unknown")
    toxic_type = "down" if kind == "partition" else kind
    streams = ["upstream", "downstream"] if fault.direction == "both" else [fault.direction]
    if toxic_type == "down" and attrs["mode"] == "refuse":
        streams = ["downstream"]  # a refusal acts on the whole link
    return [
        {
            "name": f"{kind}_{stream}_{tag}",
            "type": toxic_type,
            "stream": stream,
            "toxicity": fault.toxicity,
            "attributes": attrs,
        }
        for stream in streams
    ]


@dataclass(frozen=True)
class Episode:
    """One fault occurrence: in force from `start` to `end` (run-clock seconds)."""

    index: int
    """Position of the fault in the scenario's ``faults`` list."""
    fault: str
    """Scenario kind: ``broker_kill``, ``latency``, ``stochastic``, ..."""
    target: str
    """Scenario target: ``broker``/``brokerN`` or the side ``producers|consumers|all``."""
    action: str
    """kill | pause | restart | memory_alarm | disk_alarm | network"""
    start: float
    end: float
    episode: int = 0
    params: Mapping[str, Any] = field(default_factory=dict)
    clipped: bool = False
    toxics: tuple[dict[str, Any], ...] = ()
    """Network faults: the toxics added to each link of the side (`network_toxics`)."""


BROKER_FAULT_KINDS: tuple[str, ...] = get_args(BrokerFault.model_fields["kind"].annotation)
"""The kinds of a `BrokerFault` (a broker node's process or alarms), read off the schema."""


def is_broker_target(target: str, node_names: Mapping[str, str] | None) -> bool:
    """Whether a fault target names a broker node (rather than a client group or side)."""
    return target in (node_names or {}) or re.fullmatch(r"broker\d*", target) is not None


def is_broker_fault(kind: str, target: str, node_names: Mapping[str, str] | None = None) -> bool:
    """Whether a fault of `kind` on `target` acts on a broker node: a `BrokerFault`, or a
    stochastic fault whose target names a node (`is_broker_target`)."""
    return kind in BROKER_FAULT_KINDS or (
        kind == "stochastic" and is_broker_target(target, node_names)
    )


def _params(fault: Any) -> dict[str, Any]:
    skip = {"kind", "at", "target", "side"}
    return {k: v for k, v in fault.model_dump().items() if v is not None and k not in skip}


def plan_faults(
    faults: Sequence[Any],
    *,
    seed: int,
    stop_at: float | None = None,
    node_names: Mapping[str, str] | None = None,
) -> list[Episode]:
    """Every episode the live runner executes, in start order. Client faults and stochastic
    faults on consumer groups are left out (the workload runs them: `plan_crashes`). The
    stochastic rng of fault *i* is `testbed.core.seeds.stochastic_fault_rng`."""
    horizon = math.inf if stop_at is None else float(stop_at)
    episodes: list[Episode] = []

    def add(i: int, f: Any, target: str, action: str, start: float, end: float, n: int = 0) -> None:
        if start >= horizon:
            return
        toxics = tuple(network_toxics(f, f"f{i}")) if action == "network" else ()
        episodes.append(
            Episode(
                i,
                f.kind,
                target,
                action,
                start,
                min(end, horizon),
                n,
                _params(f),
                clipped=end > horizon,
                toxics=toxics,
            )
        )

    for i, f in enumerate(faults):
        if f.kind in ("broker_kill", "broker_pause", "broker_restart"):
            add(i, f, f.target, f.kind.removeprefix("broker_"), f.at, f.at + f.duration)
        elif f.kind in BROKER_FAULT_KINDS:  # the alarms
            add(i, f, f.target, f.kind, f.at, f.at + f.duration)
        elif f.kind == "stochastic":
            if not is_broker_target(f.target, node_names):
                continue
            action = "pause" if f.mode == "pause" else "kill"
            rng = stochastic_fault_rng(seed, i)
            for n, (down, up) in enumerate(stochastic_schedule(f, rng, horizon)):
                add(i, f, f.target, action, down, up, n)
        elif f.kind in ("consumer_crash", "producer_crash"):
            continue
        else:
            add(i, f, f.side, "network", f.at, f.at + f.duration)
    return sorted(episodes, key=lambda e: (e.start, e.index, e.episode))


def episode_detail(ep: Episode) -> dict[str, Any]:
    """What every ``fault_start``/``fault_end`` row of episode `ep` carries, live and simulated."""
    return {
        "kind": ep.fault,
        "index": ep.index,
        "episode": ep.episode,
        "scheduled": round(ep.start, 6),
        "params": dict(ep.params),
    }


@dataclass(frozen=True, order=True)
class CrashPlan:
    """One client crash: `count` instances of `group` (or instance `instance`) at `at`."""

    at: float
    group: str
    kind: str  # consumer_crash | producer_crash
    instance: int | None  # None: the first `count` live instances
    count: int
    restart_after: float | None
    index: int = 0
    """Position of the fault in the scenario's ``faults`` list."""


def plan_crashes(
    scenario: Scenario, seed: int, instances: Mapping[str, int], stop: float
) -> list[CrashPlan]:
    """The client-crash timeline, in scenario order (fault, instance, episode; `sorted` gives
    time order). `instances` maps a group to its instance count (a live workload process: its
    local count); instance *k* of a group under stochastic fault *i* draws from
    `testbed.core.seeds.crash_rng` (seed, i, k)."""
    plans: list[CrashPlan] = []
    consumers = {c.name for c in scenario.consumers}
    for i, f in enumerate(scenario.faults):
        if isinstance(f, ClientFault):
            plans.append(CrashPlan(f.at, f.target, f.kind, None, f.count, f.restart_after, i))
        elif isinstance(f, StochasticFault) and f.target in consumers:
            for k in range(instances.get(f.target, 0)):
                for down, up in stochastic_schedule(f, crash_rng(seed, i, k), stop):
                    plans.append(CrashPlan(down, f.target, "consumer_crash", k, 1, up - down, i))
    return plans
