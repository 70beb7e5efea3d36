"""Quantities with units, as scenario files write them: durations, rates and sizes.

- Durations: ``250ms``, ``2s``, ``1.5m``/``5min``, ``1h``, ``500us``/``500µs``, ``100ns``;
  a bare number means seconds.
- Rates: ``50/s``, ``3000/min``, ``1.54/s``, ``2/ms``; a bare number means per second.
- Sizes: ``200B``, ``1KB`` (1000 B), ``1.74KiB`` (1024 B), ``2MB``, ``1MiB``, ``1GB``;
  a bare number means bytes.
- Bandwidths (a network toxic's ``rate``): ``100KB/s``, ``1MB/s``, ``800B/s``.
- A unit is *required* (a bare number other than 0 is an error) where another tool reads a bare
  number in another unit: service and think times (``mean: 5`` is rarely 5 s), a network
  toxic's ``latency``, ``jitter``, ``delay``, ``timeout``, ``retransmit_delay`` (Toxiproxy: ms)
  and bandwidth ``rate`` (Toxiproxy: KB/s). Durations are at most 366 days.

Every parser returns a float in base units (seconds, 1/second, bytes) and raises
``ValueError`` naming the offending text and the accepted forms.
"""

from __future__ import annotations

__all__ = [
    "Duration",
    "Rate",
    "Size",
    "parse_duration",
    "parse_rate",
    "parse_size",
    "parse_bandwidth",
    "Bandwidth",
    "MAX_DURATION",
    "quantity_dimension",
    "format_duration",
]

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"

_TIME_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
_SIZE_UNITS: dict[str, float] = {
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "kib": 1024.0,
    "mib": 1024.0**2,
    "gib": 1024.0**3,
}
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-zµ/]*)\s*$")
_RATE = re.compile(rf"^\s*({_NUMBER})\s*(?:/|per\s+)\s*([A-Za-zµ]+)\s*$")


MAX_DURATION = 366 * 86400.0
"""A year: longer durations are typos (``1e300``) that would keep a prediction running until
killed, never an experiment."""


def _finite(value: float, text: object, what: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{what} {text!r} is not a finite number")
    if what == "duration" and abs(value) > MAX_DURATION:
        raise ValueError(
            f"duration {text!r} is {value:.3g} s, beyond the limit of 366 days; "
            "check the unit (e.g. '250ms', '2s', '5m', '1h')"
        )
    return value


def parse_duration(value: Any) -> float:
    """Seconds from ``"250ms"``, ``"2s"``, ``"5m"``, or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"duration {value!r} is a boolean; write e.g. '250ms' or '2s'")
    if isinstance(value, int | float):
        return _finite(float(value), value, "duration")
    if not isinstance(value, str):
        raise ValueError(f"duration {value!r} must be a number of seconds or a string like '250ms'")
    m = _QUANTITY.match(value)
    if not m:
        raise ValueError(
            f"duration {value!r} is not a number with a unit (e.g. '250ms', '2s', '5m')"
        )
    number, unit = float(m.group(1)), m.group(2)
    if unit == "":
        return _finite(number, value, "duration")
    factor = _TIME_UNITS.get(unit)
    if factor is None:
        raise ValueError(
            f"duration {value!r} has unknown unit {unit!r} (use one of ns, us, ms, s, m, min, h)"
        )
    return _finite(number * factor, value, "duration")


def parse_rate(value: Any) -> float:
    """Events per second from ``"50/s"``, ``"3000/min"``, or a bare number per second."""
    if isinstance(value, bool):
        raise ValueError(f"rate {value!r} is a boolean; write e.g. '50/s'")
    if isinstance(value, int | float):
        return _finite(float(value), value, "rate")
    if not isinstance(value, str):
        raise ValueError(f"rate {value!r} must be a number per second or a string like '50/s'")
    m = _RATE.match(value)
    if not m:
        try:
            return _finite(float(value), value, "rate")
        except ValueError:
            raise ValueError(
                f"rate {value!r} is not a number per time unit (e.g. '50/s', '3000/min')"
            ) from None
    number, unit = float(m.group(1)), m.group(2)
    factor = _TIME_UNITS.get(unit)
    if factor is None:
        raise ValueError(f"rate {value!r} has unknown time unit {unit!r} (use ms, s, min, h)")
    return _finite(number / factor, value, "rate")


def parse_size(value: Any) -> float:
    """Bytes from ``"200B"``, ``"1KB"`` (1000), ``"1.74KiB"`` (1024), or a bare number."""
    if isinstance(value, bool):
        raise ValueError(f"size {value!r} is a boolean; write e.g. '1KB'")
    if isinstance(value, int | float):
        return _finite(float(value), value, "size")
    if not isinstance(value, str):
        raise ValueError(f"size {value!r} must be a number of bytes or a string like '1KB'")
    m = _QUANTITY.match(value)
    if not m:
        raise ValueError(f"size {value!r} is not a number with a unit (e.g. '200B', '1KB', '1MiB')")
    number, unit = float(m.group(1)), m.group(2)
    if unit == "":
        return _finite(number, value, "size")
    factor = _SIZE_UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(
            f"size {value!r} has unknown unit {unit!r} (use B, KB, MB, GB, KiB, MiB, GiB)"
        )
    return _finite(number * factor, value, "size")


def parse_bandwidth(value: Any) -> float:
    """Bytes per second from ``"100KB/s"``, ``"1MiB/s"``, ``"800B/min"``, a size (``"100KB"``,
    per second) or a bare number of bytes per second (the scenario loader asks files for a unit:
    Toxiproxy reads a bare bandwidth in KB/s, see :mod:`testbed.core.scenario_units`)."""
    if isinstance(value, str) and "/" in value:
        size, _, per = value.rpartition("/")
        factor = _TIME_UNITS.get(per.strip())
        if factor is None:
            raise ValueError(
                f"bandwidth {value!r} has unknown time unit {per.strip()!r} (e.g. '100KB/s')"
            )
        try:
            return parse_size(size) / factor
        except ValueError:
            raise ValueError(
                f"bandwidth {value!r} is not a size per time (e.g. '100KB/s', '1MB/s')"
            ) from None
    return parse_size(value)


def quantity_dimension(value: Any) -> str | None:
    """'time', 'size', 'rate' for a string with a recognisable unit, else None."""
    if not isinstance(value, str):
        return None
    if _RATE.match(value):
        return "rate"
    m = _QUANTITY.match(value)
    if not m or not m.group(2):
        return None
    unit = m.group(2)
    if unit in _TIME_UNITS:
        return "time"
    if unit.lower() in _SIZE_UNITS:
        return "size"
    return None


def format_duration(seconds: float) -> str:
    """A short human form: 0.005 -> '5ms', 90 -> '90s'."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:g}us"
    if seconds < 1:
        return f"{seconds * 1e3:g}ms"
    return f"{seconds:g}s"


Duration = Annotated[float, BeforeValidator(parse_duration)]
Rate = Annotated[float, BeforeValidator(parse_rate)]
Size = Annotated[float, BeforeValidator(parse_size)]
Bandwidth = Annotated[float, BeforeValidator(parse_bandwidth)]
