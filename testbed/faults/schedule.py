"""Pure fault planning; `plan_faults` and `stochastic_schedule` serve live runs and the simulator.

- `plan_faults`: the scenario's faults → the `Episode`s the live `FaultRunner` executes (seeded;
  client faults and consumer-group stochastic faults are the workload's and left out);
- `stochastic_schedule`: failure/repair times of a `StochasticFault` (exponential MTTF/MTTR);
- `network_toxics`: a `NetworkFault` as Toxiproxy toxics in Toxiproxy's units;
- `check_faults`: every reason a scenario's faults cannot run live, for run start-up.

Shared semantics: a fault starts only before `stop_at`, and is healed by `stop_at` at the
latest (``Episode.clipped``).
"""

from __future__ import annotations

__all__ = [
    "Episode",
    "plan_faults",
    "stochastic_schedule",
    "network_toxics",
    "check_faults",
    "links_for",
    "needs_proxy",
    "stochastic_rng",
]

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from testbed.faults.injector import supported
from testbed.faults.toxics import FaultError

MAX_EPISODES = 100_000


# --- planning (pure) ----------------------------------------------------------------------------


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


def _is_broker_target(target: str, node_names: Mapping[str, str] | None) -> bool:
    return target in (node_names or {}) or re.fullmatch(r"broker\d*", target) is not None


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
    faults on consumer groups are left out (the workload runs them). The stochastic rng of
    fault *i* is ``numpy.random.default_rng([seed, i])``."""
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
        elif f.kind in ("memory_alarm", "disk_alarm"):
            add(i, f, f.target, f.kind, f.at, f.at + f.duration)
        elif f.kind == "stochastic":
            if not _is_broker_target(f.target, node_names):
                continue
            action = "pause" if f.mode == "pause" else "kill"
            rng = stochastic_rng(seed, i)
            for n, (down, up) in enumerate(stochastic_schedule(f, rng, horizon)):
                add(i, f, f.target, action, down, up, n)
        elif f.kind in ("consumer_crash", "producer_crash"):
            continue
        else:
            add(i, f, f.side, "network", f.at, f.at + f.duration)
    return sorted(episodes, key=lambda e: (e.start, e.index, e.episode))


def needs_proxy(faults: Sequence[Any]) -> bool:
    """Whether any fault is a network fault (clients must then connect through proxy links)."""
    return any(getattr(f, "side", None) is not None for f in faults)


def stochastic_rng(seed: int, index: int) -> np.random.Generator:
    """The rng of the stochastic fault at position `index` of the scenario's faults: the live
    runner, the workload (consumer-group crashes) and the simulator all draw from this."""
    return np.random.default_rng([seed, index])


def links_for(side: str, links: Mapping[str, Sequence[str]]) -> list[str]:
    """Proxy link names of a fault side; ``all`` = the ``all`` entry or producers + consumers."""
    if side in links:
        return list(links[side])
    if side == "all":
        names = [*links.get("producers", ()), *links.get("consumers", ())]
        return list(dict.fromkeys(names))
    return []


def _is_broker_fault(f: Any, node_names: Mapping[str, str] | None) -> bool:
    if f.kind in ("broker_kill", "broker_pause", "broker_restart", "memory_alarm", "disk_alarm"):
        return True
    return f.kind == "stochastic" and _is_broker_target(str(f.target), node_names)


def check_faults(
    faults: Sequence[Any],
    *,
    broker_kind: str,
    backend: str = "local",
    node_names: Mapping[str, str] | None = None,
    links: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """Every reason the live runner could not execute `faults` (empty: all fine), each naming
    ``faults[i]``. `node_names`: scenario target → node; `links`: side → proxy link names
    (None: no proxy)."""
    problems: list[str] = []
    for i, f in enumerate(faults):
        where = f"faults[{i}] ({f.kind})"
        reason = supported(f, broker_kind, backend)
        if reason:
            problems.append(f"{where}: {reason}")
        known = node_names
        if known is not None and _is_broker_fault(f, known) and f.target not in known:
            problems.append(
                f"{where}: target {f.target!r} is not a broker node (known: {sorted(known)})"
            )
        side = getattr(f, "side", None)
        if side is None:
            continue
        if links is None:
            problems.append(f"{where}: network faults need the fault proxy (no links given)")
        elif not links_for(side, links):
            problems.append(f"{where}: no proxy link for side {side!r} (have {sorted(links)})")
        if (
            f.kind == "partition"
            and f.mode == "refuse"
            and (f.toxicity < 1 or f.direction != "both")
        ):
            problems.append(
                f"{where}: partition mode 'refuse' closes the whole link; it needs toxicity 1 "
                f"and direction 'both' (got {f.toxicity:g}, {f.direction!r})"
            )
    return problems
