"""The ρ ≥ 1 stability warning of :func:`testbed.core.scenario_checks.check_scenario`, located
at the field that drives it (issue 16 item 2), not at the queue's name.

A queue is unstable when its offered load reaches its consumers' capacity. The warning sits on
the consumers' ``service_time`` (the capacity side; its ``mean`` or ``value`` line when the
file gives one) and names the producers' ``arrival`` fields feeding the queue, each with its
``file:line``. A queue no consumer reads is located at the group's ``count: 0``, or at the
first producer's ``arrival`` when no group reads it at all. A bare service time of a second or
more is probably milliseconds (``mean: 5`` is 5 s of work per message): the warning says
"a bare 5 is 5 s; did you mean 5ms?" next to the unit error of
:mod:`testbed.core.scenario_units`.
"""

from __future__ import annotations

__all__ = ["check_stability"]

import math
from typing import TYPE_CHECKING, Any

from testbed.core.load import QueueLoad, arrival_mean_rate, offered_load
from testbed.core.yamlmap import format_path

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario

Path_ = tuple[str | int, ...]

_SERVICE_KEYS = ("mean", "value", "mean2", "mean1", "high")
"""Keys of a service-time mapping that set its size, the first present is the one named."""
_RATE_KEYS = ("rate", "rates", "to", "steps")
"""Keys of an arrival mapping that set its rate, the first present is the one named."""


def check_stability(c: Any, s: Scenario, data: dict[str, Any]) -> None:
    """Unless `overload: true` (or there are errors already): warn on every queue whose offered
    load reaches its consumers' capacity (ρ ≥ 1). Warnings go to `c` (``c.warn(path, msg)``,
    with ``c.file`` and ``c.lines`` to locate the other fields named)."""
    if any(i.severity == "error" for i in c.issues) or s.overload:
        return
    for qname, load in offered_load(s).items():
        if load.utilisation < 1.0:
            continue
        feeders = _feeders(s, data, qname)
        where, hint = _at_fault(s, data, qname, load, feeders)
        named = [f for f in feeders if f != where][:3]
        fed = "; arrivals from " + ", ".join(_located(c, f) for f in named) if named else ""
        c.warn(
            where,
            f"queue {qname!r} is unstable: utilisation ρ = {load.utilisation:.3g} "
            f"≥ 1 ({_detail(load)}){fed}; "
            + (f"{hint} (or set" if hint else "set")
            + " 'overload: true' if this is an overload experiment"
            + (")" if hint else ""),
        )


def _detail(load: QueueLoad) -> str:
    if load.consumers == 0:
        return f"no consumer reads it at {load.arrival_rate:.4g} msg/s"
    if load.hold_s:
        return (
            f"in order: {load.arrival_rate:.4g}/s × {load.mean_service:.4g} s "
            f"service + {load.attempt_rate - load.arrival_rate:.4g}/s failed attempts "
            f"× {load.hold_s:.4g} s holding the line, one consumer at a time"
        )
    per = 1 / load.mean_service if load.mean_service else math.inf
    return f"λ = {load.attempt_rate:.4g}/s, {load.consumers} consumers × {per:.4g}/s"


def _located(c: Any, path: Path_) -> str:
    line = c.lines.line(path)
    return f"{format_path(path)} ({c.file}:{line})" if line else format_path(path)


def _raw(data: Any, path: Path_) -> Any:
    """The file's value at `path` (None where the data has no such entry)."""
    node = data
    for part in path:
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def _keyed(data: dict[str, Any], path: Path_, keys: tuple[str, ...]) -> Path_:
    """`path`, or its first child among `keys` when the file's value there is a mapping."""
    node = _raw(data, path)
    if isinstance(node, dict):
        for key in keys:
            if key in node:
                return path + (key,)
    return path


def _feeders(s: Scenario, data: dict[str, Any], queue: str) -> list[Path_]:
    """The fields that send messages to `queue`: producers' arrivals, then follow-ups."""
    out: list[Path_] = []
    for pi, p in enumerate(s.producers):
        keys = p.routing_key if isinstance(p.routing_key, list) else [p.routing_key]
        routed = p.exchange is not None and any(
            queue in s.routed_queues(p.exchange, k) for k in keys
        )
        if (p.queue == queue or routed) and arrival_mean_rate(p.arrival) is not None:
            out.append(_keyed(data, ("producers", pi, "arrival"), _RATE_KEYS))
    for ci, cg in enumerate(s.consumers):
        for fi, f in enumerate(cg.follow_ups):
            if f.queue == queue or (
                f.exchange is not None and queue in s.routed_queues(f.exchange, f.routing_key)
            ):
                out.append(("consumers", ci, "follow_ups", fi))
    return out


def _at_fault(
    s: Scenario, data: dict[str, Any], queue: str, load: QueueLoad, feeders: list[Path_]
) -> tuple[Path_, str]:
    """Where the warning goes, and the unit hint for a bare service time there ("" if none)."""
    groups = [(ci, cg) for ci, cg in enumerate(s.consumers) if cg.queue == queue]
    if load.consumers == 0:
        if groups:
            return ("consumers", groups[0][0], "count"), ""
        if feeders:
            return feeders[0], ""
        for qi, q in enumerate(s.topology.queues):
            if q.name == queue:
                return ("topology", "queues", qi, "name"), ""
        return ("topology",), ""
    ci, _ = max(groups, key=lambda g: float(g[1].service_time.mean))
    path = _keyed(data, ("consumers", ci, "service_time"), _SERVICE_KEYS)
    value = _raw(data, path)
    bare = isinstance(value, int | float) and not isinstance(value, bool) and value >= 1
    hint = f"a bare {value:g} is {value:g} s; did you mean {value:g}ms?" if bare else ""
    return path, hint
