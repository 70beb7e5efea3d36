"""Values that pass the schema but fail or mislead later, found at load time (issue 16 item 3):
called by :func:`testbed.core.scenario_checks.check_scenario` with its issue collector.

- prefetch above 65535 on AMQP 0-9-1: ``basic.qos`` carries it in 16 bits (pika refuses it
  mid-run, or it wraps);
- routing and binding keys longer than 255 bytes (UTF-8): AMQP's short string;
- queue and exchange names starting ``amq.`` on RabbitMQ: reserved, the declaration is refused
  with ACCESS_REFUSED;
- a crash of more clients than the group has;
- a stochastic fault whose window or first expected failure lies past the run's end (a
  warning: the user may mean a rare fault, but then the run will most likely show none).
"""

from __future__ import annotations

__all__ = ["check_bounds", "MAX_PREFETCH", "MAX_KEY_BYTES"]

from typing import TYPE_CHECKING, Any

from testbed.core.broker_kinds import KINDS
from testbed.core.scenario_faults import ClientFault, StochasticFault

if TYPE_CHECKING:
    from testbed.core.scenario import Scenario

MAX_PREFETCH = 65535
"""AMQP 0-9-1 ``basic.qos`` prefetch-count is a 16-bit field."""
MAX_KEY_BYTES = 255
"""AMQP 0-9-1 short string: routing and binding keys, names."""

Path_ = tuple[str | int, ...]


def check_bounds(c: Any, s: Scenario) -> None:
    """Report every bound above to `c` (an error/warn collector of the scenario checks)."""
    amqp = s.broker.kind in KINDS and KINDS[s.broker.kind].protocol.startswith("AMQP")
    for ci, group in enumerate(s.consumers):
        if amqp and group.prefetch > MAX_PREFETCH:
            c.error(
                ("consumers", ci, "prefetch"),
                f"prefetch {group.prefetch} is above AMQP's limit of {MAX_PREFETCH} (a 16-bit "
                "field); use 0 for unlimited",
            )
        for fi, f in enumerate(group.follow_ups):
            _key(c, ("consumers", ci, "follow_ups", fi, "routing_key"), f.routing_key)
    for pi, p in enumerate(s.producers):
        keys = p.routing_key if isinstance(p.routing_key, list) else [p.routing_key]
        for key in keys:
            _key(c, ("producers", pi, "routing_key"), key)
    for qi, q in enumerate(s.topology.queues):
        for bi, b in enumerate(q.bindings):
            _key(c, ("topology", "queues", qi, "bindings", bi, "key"), b.key)
    if (prefix := KINDS[s.broker.kind].reserved_prefix) is not None:
        _reserved_names(c, s, prefix, KINDS[s.broker.kind].title)
    _check_fault_bounds(c, s)


def _key(c: Any, path: Path_, key: str | None) -> None:
    if key is not None and (n := len(key.encode("utf-8"))) > MAX_KEY_BYTES:
        c.error(
            path,
            f"key {key[:30]!r}… is {n} bytes; AMQP allows at most {MAX_KEY_BYTES} (UTF-8)",
        )


def _reserved_names(c: Any, s: Scenario, prefix: str, title: str) -> None:
    named: list[tuple[Path_, str]] = [
        (("topology", "queues", i, "name"), q.name) for i, q in enumerate(s.topology.queues)
    ]
    named += [
        (("topology", "exchanges", i, "name"), x.name) for i, x in enumerate(s.topology.exchanges)
    ]
    named += [
        (("topology", "load_balanced", i, "alias"), lb.alias)
        for i, lb in enumerate(s.topology.load_balanced)
    ]
    for i, q in enumerate(s.topology.queues):
        if q.visibility and q.visibility.dead_letter_queue:
            path: Path_ = ("topology", "queues", i, "visibility", "dead_letter_queue")
            named.append((path, q.visibility.dead_letter_queue))
    for path, name in named:
        if name.startswith(prefix):
            c.error(
                path,
                f"{name!r}: names starting {prefix!r} are reserved by {title} (declaring one is "
                "refused with ACCESS_REFUSED); choose another prefix",
            )


def _check_fault_bounds(c: Any, s: Scenario) -> None:
    scaled = {a.target: a.max_replicas for a in s.autoscaling}
    for fi, fault in enumerate(s.faults):
        fp: Path_ = ("faults", fi)
        if isinstance(fault, ClientFault):
            group = (
                s.consumer_group(fault.target)
                if fault.kind == "consumer_crash"
                else s.producer_group(fault.target)
            )
            if group is None:
                continue  # unknown target: reported by the reference checks
            most = scaled.get(fault.target, group.count)
            if fault.count > most:
                c.error(
                    fp + ("count",),
                    f"count {fault.count} crashes more clients than group {fault.target!r} "
                    f"has ({most})",
                )
        if isinstance(fault, StochasticFault) and fault.at < s.duration:
            if fault.until is not None and fault.until > s.duration:
                c.warn(
                    fp + ("until",),
                    f"until {fault.until:g}s is past the end of the run ({s.duration:g}s); "
                    "failures stop with the run",
                )
            window = min(fault.until or s.duration, s.duration) - fault.at
            if fault.mttf >= window:
                c.warn(
                    fp + ("mttf",),
                    f"the first failure is expected {fault.mttf:g}s after {fault.at:g}s, past "
                    f"the end of its window ({fault.at + window:g}s): the run will most likely "
                    "show no failure; shorten mttf (accelerated faults, docs/models.md §6)",
                )
