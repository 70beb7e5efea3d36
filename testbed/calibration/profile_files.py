"""A calibration profile's files: the commented YAML and the sidecar JSON beside it.

`write_outputs` assembles the measurements (`testbed.calibration.assemble`), writes the profile
YAML — a header saying what was measured, by which command, when and under which load; each
field with a comment on how it was derived — validates it by loading it back, and writes the
sidecar (``NAME.points.json`` beside ``NAME.yaml``, `sidecar_path`) with every measured point and
probe, enough to derive the profile again (`testbed.calibration.reassemble`).
"""

from __future__ import annotations

__all__ = ["render_yaml", "sidecar_path", "write_outputs"]

import json
import math
import os
import socket
import statistics
import textwrap
from pathlib import Path
from typing import Any

from testbed.calibration.assemble import Assembly, assemble
from testbed.calibration.protocol import CalibrationData
from testbed.core.broker_kinds import KINDS
from testbed.core.profile import Profile, load_profile


def _num(x: float | int | None) -> str:
    """A YAML number PyYAML reads back as int/float (floats need a '.' and a signed exponent)."""
    if x is None:
        return "null"
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    if x == 0:
        return "0.0"
    if float(x).is_integer() and abs(x) < 1e6:
        return f"{int(x)}"
    text = f"{x:.4g}"
    if "e" in text:
        mant, exp = text.split("e")
        return f"{mant if '.' in mant else mant + '.0'}e{exp}"
    return text if "." in text else text + ".0"


def _flow(d: dict[str, Any]) -> str:
    parts = []
    for k, v in d.items():
        if v is None:
            continue
        if k in ("r", "r2"):
            parts.append(f"{k}: {v:.4f}")
        else:
            parts.append(f"{k}: {_num(v)}")
    return "{" + ", ".join(parts) + "}"


def _c(text: str | None) -> str:
    return f"  # {text}" if text else ""


def render_yaml(asm: Assembly, header: list[str], notes: str) -> str:
    """The profile as commented YAML in the placeholders' layout."""
    p = asm.profile
    c = asm.comments
    out = [f"# {h}" if h else "#" for h in header]
    out += [
        "source: measured",
        f"host: {json.dumps(p['host'])}",
        f"broker: {{kind: {p['broker']['kind']}, version: {json.dumps(p['broker']['version'])}}}",
        f"date: {json.dumps(p['date'])}",
        f"reference_size: {_num(p['reference_size'])}",
        f"network_delay: {_num(p['network_delay'])}{_c(c.get('network_delay'))}",
        f"latency:{_c(c.get('latency'))}",
    ]
    for cfg, variants in p["latency"].items():
        out.append(f"  {cfg}:")
        for name in ("low_load", "high_load"):
            out.append(f"    {name + ':':<11}{_flow(variants[name])}")
    for key in (
        "persistence", "confirm_overhead", "prefetch_overhead", "routing", "publish_time",
        "write_time", "read_time", "queue_service",
    ):  # fmt: skip
        out.append(f"{key}: {_flow(p[key])}{_c(c.get(key))}")
    t = p["threads"]
    out += [
        f"threads:{_c(c.get('threads'))}",
        f"  count: {_flow(t['count']) if isinstance(t['count'], dict) else t['count']}",
        f"  receive: {_flow(t['receive'])}",
        f"  dispatch: {_flow(t['dispatch'])}",
        "memory:",
    ]
    for key in ("per_message_overhead", "base_bytes", "high_watermark"):
        out.append(f"  {key}: {_num(p['memory'][key])}{_c(c.get('memory.' + key))}")
    out.append("notes: >-")
    out += ["  " + line for line in textwrap.wrap(notes, 96, break_on_hyphens=False)]
    return "\n".join(out) + "\n"


def sidecar_path(out_path: Path) -> Path:
    """``NAME.points.json`` next to ``NAME.yaml``."""
    return out_path.with_name(out_path.stem + ".points.json")


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _clean(o: Any) -> Any:
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    if hasattr(o, "to_json"):
        return _clean(o.to_json())
    return o


def write_outputs(
    data: CalibrationData,
    out_path: Path,
    *,
    command: str,
    host: str | None = None,
    derived_by: str | None = None,
) -> Profile:
    """Assemble, write the YAML (validated by `load_profile`) and the sidecar JSON.

    `command` is the command that measured; `derived_by`, when the profile is derived again
    from a sidecar (`testbed.calibration.reassemble`), the command that did that.
    """
    asm = assemble(data, host=host, date=data.started[:10] or None)
    load = _load_text(data)
    header = _header(data, out_path, command, derived_by, load)
    notes = " ".join(
        [
            f"Measured by calibration on {socket.gethostname()}: {data.protocol.describe()}.",
            f"{load[0].upper()}{load[1:]}; the machine was shared with concurrent work, so the "
            "numbers are noisy.",
            *asm.notes,
            "memory.high_watermark is not measured.",
        ]
    )
    asm.profile["notes"] = notes
    Profile.model_validate(asm.profile)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(render_yaml(asm, header, notes), encoding="utf-8")
    prof = load_profile(out_path)
    side = _sidecar(data, asm, command, derived_by)
    sidecar_path(out_path).write_text(
        json.dumps(_clean(side), indent=1, default=_json_default) + "\n", encoding="utf-8"
    )
    return prof


def _load_text(data: CalibrationData) -> str:
    """The machine's load average at the start and end of the measurement, as prose."""
    return (
        f"load average {'/'.join(map(str, data.load_start))} at start, "
        f"{'/'.join(map(str, data.load_end))} at end"
        if data.load_start
        else "load average unknown"
    )


def _header(
    data: CalibrationData, out_path: Path, command: str, derived_by: str | None, load: str
) -> list[str]:
    """The YAML's header comment: what was measured, by which command, when, under which
    protocol and load, and how the fits read; wrapped to 98 columns."""
    p = data.protocol
    kind_name = KINDS[data.kind].title if data.kind in KINDS else data.kind
    short = p.duration < 60 or p.repeats < 3
    protocol_note = (
        "shorter than the ≥ 60 s × ≥ 3 repeats of docs/models.md §9" if short else "the §9 minimum"
    )
    header_text = [
        f"Calibration profile: {kind_name} {data.version} on this machine (docs/models.md §9). "
        "MEASURED.",
        f"Produced by: {command}",
        *(
            [f"Profile derived again from its measurements (the sidecar) by: {derived_by}"]
            if derived_by
            else []
        ),
        f"Date {data.started} .. {data.finished} (UTC); "
        f"wall time {data.wall_seconds / 60:.1f} min.",
        f"Protocol: {p.describe()} — {protocol_note}.",
        f"The machine ({os.cpu_count()} vCPU) was loaded by concurrent work of other engineers "
        f"({load}): these numbers are noisy.",
        "Fits: least squares over per-point medians (a point = one size and repeat; saturated "
        "points left out; the co-tenant stalls make per-point means erratic); "
        "r = Pearson r of the fitted data, r2 = R² of the reported line; "
        "a, b >= 0. Raw per-point statistics (means, medians, sd, p95, p99, saturation flags): "
        f"{sidecar_path(out_path).name}. Times in seconds; b in seconds per byte.",
    ]
    return [w for h in header_text for w in textwrap.wrap(h, 98, subsequent_indent="  ") or [""]]


def _sidecar(
    data: CalibrationData, asm: Assembly, command: str, derived_by: str | None
) -> dict[str, Any]:
    """The sidecar's content: provenance, the fits and notes of `asm`, and every measured
    point and probe (enough to derive the profile again)."""
    return {
        "command": command,
        "derived_by": derived_by,
        "broker": {"kind": data.kind, "version": data.version},
        "host": asm.profile["host"],
        "hostname": socket.gethostname(),
        "started": data.started,
        "finished": data.finished,
        "wall_seconds": data.wall_seconds,
        "load_average_start": data.load_start,
        "load_average_end": data.load_end,
        "protocol": data.protocol.to_json(),
        "fits": asm.fits,
        "notes": asm.notes,
        "network": data.network
        or {
            "loopback_handshake_s": {
                "n": len(data.rtts),
                "median": statistics.median(data.rtts) if data.rtts else None,
                "min": min(data.rtts) if data.rtts else None,
            }
        },
        "points": data.points,
        "routing": data.routing,
        "queue_service": data.pipes,
        "memory": data.memory,
    }
