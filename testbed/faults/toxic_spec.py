"""What a toxic is before it acts: its Toxiproxy-shaped description, checked, and its draw.

A `ToxicSpec` is one toxic as the fault proxy's HTTP API and `FaultProxy.add_toxic` take it —
name, type, stream, toxicity and attributes in Toxiproxy's JSON shape and units; `parse_toxic`
checks such a description against `TOXIC_TYPES` (the types and their attribute defaults) and
`STREAMS`, fills the defaults and names any bad key, and `applies` is the per-connection
toxicity draw. The errors the proxy answers with (`ToxicError` 400, `NotFoundError` 404,
`ConflictError` 409) live here too. What each type does to a stream, and the toxics that do it,
is `testbed.faults.toxics`.
"""

from __future__ import annotations

__all__ = [
    "ToxicError",
    "NotFoundError",
    "ConflictError",
    "STREAMS",
    "TOXIC_TYPES",
    "ToxicSpec",
    "parse_toxic",
    "applies",
]

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from testbed.exceptions import FaultError


class ToxicError(FaultError, ValueError):
    """A toxic or link description is invalid (HTTP 400)."""


class NotFoundError(FaultError, LookupError):
    """No link or toxic of that name (HTTP 404)."""


class ConflictError(FaultError):
    """A link or toxic of that name exists already (HTTP 409)."""


STREAMS = ("upstream", "downstream")
TOXIC_TYPES: dict[str, dict[str, float | str]] = {
    # type -> attribute defaults (Toxiproxy units)
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
    "down": {"mode": "refuse"},
    "loss": {"probability": 0.0, "retransmit_delay": 200},
}
_DOWN_MODES = ("refuse", "blackhole")


@dataclass(frozen=True)
class ToxicSpec:
    """One toxic as Toxiproxy describes it. Attribute values are in Toxiproxy units."""

    name: str
    type: str
    stream: str = "downstream"
    toxicity: float = 1.0
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }

    @property
    def refuses(self) -> bool:
        """A link-wide partition (``down`` with mode ``refuse``)."""
        return self.type == "down" and self.attributes.get("mode") == "refuse"


def _number(where: str, key: str, value: object, *, upper: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToxicError(f"{where}.{key}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (upper is not None and value > upper):
        bound = f"0..{upper:g}" if upper is not None else "≥ 0"
        raise ToxicError(f"{where}.{key}: must be {bound}, got {value!r}")
    return value


def parse_toxic(data: Mapping[str, Any], *, where: str = "toxic") -> ToxicSpec:
    """Validate a Toxiproxy-shaped toxic description; fill defaults (name ``<type>_<stream>``).

    Unknown keys and attributes are errors naming the bad key and what is accepted.
    """
    if not isinstance(data, Mapping):
        raise ToxicError(f"{where}: expected a JSON object, got {data!r}")
    unknown = set(data) - {"name", "type", "stream", "toxicity", "attributes"}
    if unknown:
        raise ToxicError(
            f"{where}: unknown key(s) {sorted(unknown)} "
            "(accepted: name, type, stream, toxicity, attributes)"
        )
    kind = data.get("type")
    if kind not in TOXIC_TYPES:
        raise ToxicError(f"{where}.type: unknown toxic type {kind!r} (known: {list(TOXIC_TYPES)})")
    stream = data.get("stream", "downstream")
    if stream not in STREAMS:
        raise ToxicError(f"{where}.stream: must be 'upstream' or 'downstream', got {stream!r}")
    toxicity = float(_number(where, "toxicity", data.get("toxicity", 1.0), upper=1.0))
    name = data.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str) or "/" in name:
        raise ToxicError(f"{where}.name: must be a string without '/', got {name!r}")
    raw = data.get("attributes") or {}
    if not isinstance(raw, Mapping):
        raise ToxicError(f"{where}.attributes: expected an object, got {raw!r}")
    defaults = TOXIC_TYPES[kind]
    extra = set(raw) - set(defaults)
    if extra:
        raise ToxicError(
            f"{where}.attributes: {kind} does not take {sorted(extra)} (it takes {list(defaults)})"
        )
    attrs: dict[str, Any] = dict(defaults)
    for key, value in raw.items():
        if key == "mode":
            if value not in _DOWN_MODES:
                raise ToxicError(
                    f"{where}.attributes.mode: must be one of {_DOWN_MODES}, got {value!r}"
                )
            attrs[key] = value
        else:
            attrs[key] = _number(
                f"{where}.attributes", key, value, upper=1.0 if key == "probability" else None
            )
    if kind == "slicer" and attrs["average_size"] < 1:
        raise ToxicError(
            f"{where}.attributes.average_size: slicer needs ≥ 1 byte, got {attrs['average_size']!r}"
        )
    spec = ToxicSpec(name, kind, stream, toxicity, attrs)
    if spec.refuses and toxicity != 1.0:
        raise ToxicError(
            f"{where}.toxicity: 'down' with mode 'refuse' acts on the whole link, so toxicity "
            f"must be 1.0, got {toxicity!r} (use mode 'blackhole' for some connections)"
        )
    return spec


def applies(toxicity: float, rng: random.Random) -> bool:
    """The per-connection draw: does a toxic of this `toxicity` act on a new connection?"""
    return toxicity >= 1.0 or rng.random() < toxicity
