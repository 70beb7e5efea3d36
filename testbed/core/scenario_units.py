"""Bare numbers where a scenario file's reader could mean another unit than mqbed would.

A bare number is seconds, bytes or per-second in mqbed (:mod:`testbed.core.units`). For most
fields that is what anyone means (``duration: 60``, ``rate: 50``), but not for:

- a network toxic's times (``latency``, ``jitter``, ``delay``, ``timeout``): Toxiproxy, whose
  names these are, reads them in milliseconds (slicer ``delay`` in microseconds), so
  ``latency: 50`` would be 50 s here and 50 ms there;
- a bandwidth toxic's ``rate``: Toxiproxy reads KB/s, mqbed bytes/s;
- a service or think time (``service_time: {mean: 5}``): 5 s of work per message is rarely
  meant, and it only showed up as a "ρ = 500" warning.

There, a unit is required: each bare non-zero number becomes an error naming the field, its
value and the fix. The check runs on the file's data before the schema (so the line is the
field's own), and only there: Python callers of the models keep passing seconds and bytes, and
a *resolved* scenario — the copy a run writes to its directory (``Scenario.resolved_yaml``), in
base units throughout, which workers, reports and comparisons read back — starts with
:data:`RESOLVED_HEADER` and is not checked.
Toxiproxy's own field names (``stream``, ``type``, ``attributes``) and ``for`` get a hint
toward mqbed's (see :data:`FIELD_HINTS`).
"""

from __future__ import annotations

__all__ = ["FIELD_HINTS", "RESOLVED_HEADER", "check_units"]

from typing import Any, get_args

from testbed.core.scenario_faults import NetworkFault
from testbed.core.yamlmap import LineMap, format_path
from testbed.exceptions import ScenarioIssue

RESOLVED_HEADER = "# mqbed resolved scenario: every default filled, base units (s, B, 1/s)\n"
"""First line of a run directory's ``scenario.yaml``: its bare numbers are base units."""

FIELD_HINTS: dict[str, str] = {
    "stream": "Toxiproxy's name for 'direction' (upstream, downstream or both)",
    "for": "write 'duration' (how long the fault lasts)",
    "type": "Toxiproxy's name for 'kind'",
    "attributes": "Toxiproxy's attributes go on the fault itself (e.g. 'latency: 50ms')",
    "toxic": "write 'kind' (e.g. 'kind: latency')",
}
"""Unknown keys a Toxiproxy (or k6/Chaos-tool) user writes, with mqbed's field for them."""

_NETWORK_KINDS = set(get_args(NetworkFault.model_fields["kind"].annotation))
"""The toxics (the network fault kinds of the schema)."""
_TOXIC_MS = ("latency", "jitter", "timeout")
_TIME_KEYS = ("mean", "sd", "value", "low", "high", "mean1", "mean2")

Path_ = tuple[str | int, ...]


def _bare(value: Any) -> bool:
    """A number without a unit, other than 0 (zero is zero in every unit)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value != 0


class _Issues:
    def __init__(self, lines: LineMap, file: str):
        self.lines, self.file = lines, file
        self.found: list[ScenarioIssue] = []

    def add(self, path: Path_, msg: str) -> None:
        self.found.append(ScenarioIssue(self.file, self.lines.line(path), format_path(path), msg))


def _time_distribution(out: _Issues, node: Any, path: Path_, what: str) -> None:
    def report(value: Any, where: Path_) -> None:
        out.add(
            where,
            f"{value!r} has no unit; a {what} needs one: write '{value:g}ms' or "
            f"'{value:g}s' (a bare number would mean {value:g} seconds)",
        )

    if _bare(node):
        report(node, path)
    elif isinstance(node, dict):
        for key in _TIME_KEYS:
            if _bare(node.get(key)):
                report(node[key], path + (key,))
        values = node.get("values")
        if isinstance(values, list):
            for i, v in enumerate(values):
                if _bare(v):
                    report(v, path + ("values", i))


def _network_fault(out: _Issues, fault: dict[str, Any], path: Path_) -> None:
    kind = fault.get("kind")
    for key in (*_TOXIC_MS, "delay", "retransmit_delay"):
        value = fault.get(key)
        if not _bare(value):
            continue
        if key == "delay" and kind == "slicer":
            native, example = "microseconds", f"'{value:g}us'"
        elif key in (*_TOXIC_MS, "delay"):
            native, example = "milliseconds", f"'{value:g}ms'"
        else:
            native, example = "", f"'{value:g}ms'"
        told = f"Toxiproxy reads {key} in {native}, mqbed in seconds" if native else "ambiguous"
        out.add(
            path + (key,),
            f"{value!r} has no unit ({told}); write {example} or '{value:g}s'",
        )
    rate = fault.get("rate")
    if kind == "bandwidth" and _bare(rate):
        out.add(
            path + ("rate",),
            f"{rate!r} has no unit (Toxiproxy reads rate in KB/s, mqbed in bytes/s); write "
            f"'{rate:g}KB/s' for Toxiproxy's meaning, or e.g. '{rate:g}B/s', '{rate:g}MB/s'",
        )


def check_units(data: dict[str, Any], lines: LineMap, file: str) -> list[ScenarioIssue]:
    """Errors for every bare number in a field where it is ambiguous (see the module doc)."""
    out = _Issues(lines, file)
    for ci, group in enumerate(_items(data.get("consumers"))):
        if "service_time" in group:
            _time_distribution(
                out, group["service_time"], ("consumers", ci, "service_time"), "service time"
            )
    for pi, producer in enumerate(_items(data.get("producers"))):
        arrival = producer.get("arrival")
        if isinstance(arrival, dict) and "think_time" in arrival:
            where: Path_ = ("producers", pi, "arrival", "think_time")
            _time_distribution(out, arrival["think_time"], where, "think time")
    for fi, fault in enumerate(_items(data.get("faults"))):
        if fault.get("kind") in _NETWORK_KINDS:
            _network_fault(out, fault, ("faults", fi))
    return out.found


def _items(section: Any) -> list[dict[str, Any]]:
    """The mappings of a list section; anything else is the schema's to report."""
    if not isinstance(section, list):
        return []
    return [x if isinstance(x, dict) else {} for x in section]
