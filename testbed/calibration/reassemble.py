"""Derive a profile again from a calibration sidecar, without measuring (docs/models.md §9).

The sidecar (``NAME.points.json``) holds every per-point summary a profile is derived from
(`testbed.calibration.assemble` needs no single samples). When the derivation rules change,

    python -m testbed.calibration.reassemble deploy/calibration/rabbitmq-local.points.json

rewrites ``rabbitmq-local.yaml`` and the sidecar's fits and notes from the same measurements;
the profile header names both the measuring command and this one.
"""

from __future__ import annotations

__all__ = ["load_measurements", "main", "reassemble"]

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from testbed.calibration.bench import MemoryProbe, PipeProbe, PointStats
from testbed.calibration.fitting import Summary
from testbed.calibration.profile_files import write_outputs
from testbed.calibration.protocol import CalibrationData, Protocol
from testbed.core.profile import Profile
from testbed.exceptions import ConfigurationError, MqbedError

_NAN = float("nan")


def _summary(d: dict[str, Any] | None) -> Summary | None:
    return None if d is None else Summary(**d)


def _point(d: dict[str, Any]) -> PointStats:
    fields = dict(d)
    for k in ("latency", "write", "read", "publish"):
        fields[k] = _summary(fields.get(k))
    return PointStats(**fields)


def _num(v: Any) -> float:
    return _NAN if v is None else float(v)


def _protocol(d: dict[str, Any]) -> Protocol:
    fields: dict[str, Any] = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in d.items()
        if k in Protocol.__dataclass_fields__
    }
    return Protocol(**fields)


def load_measurements(sidecar: Path) -> tuple[CalibrationData, dict[str, Any]]:
    """The measurements of a sidecar as `CalibrationData`, and the raw sidecar."""
    try:
        side = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigurationError(f"{sidecar}: cannot read calibration sidecar: {e}") from e
    try:
        net = side.get("network") or {}
        hs = net.get("loopback_handshake_s") or {}
        data = CalibrationData(
            kind=side["broker"]["kind"],
            version=side["broker"]["version"],
            protocol=_protocol(side["protocol"]),
            points=[_point(p) for p in side["points"]],
            routing=[_point(p) for p in side["routing"]],
            pipes=[
                PipeProbe(
                    size=p["size"],
                    repeat=p["repeat"],
                    sent=p["sent"],
                    received=p["received"],
                    seconds=_num(p["seconds"]),
                    per_message=_num(p["per_message"]),
                    errors=tuple(p.get("errors") or ()),
                )  # fmt: skip
                for p in side["queue_service"]
            ],
            memory=[
                MemoryProbe(
                    size=m["size"],
                    n=m["n"],
                    before=_num(m["before"]),
                    after=_num(m["after"]),
                    per_message=_num(m["per_message"]),
                    errors=tuple(m.get("errors") or ()),
                )  # fmt: skip
                for m in side["memory"]
            ],
            rtts=[float(hs["median"])] if hs.get("median") is not None else [],
            started=side.get("started", ""),
            finished=side.get("finished", ""),
            wall_seconds=float(side.get("wall_seconds") or 0.0),
            load_start=tuple(side.get("load_average_start") or ()),
            load_end=tuple(side.get("load_average_end") or ()),
            network=net or None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigurationError(f"{sidecar}: not a calibration sidecar ({e!r})") from e
    return data, side


def reassemble(sidecar: Path, out_path: Path | None = None, *, derived_by: str) -> Profile:
    """Rewrite the profile (default: the YAML next to the sidecar) and the sidecar's fits."""
    data, side = load_measurements(sidecar)
    if out_path is None:
        name = sidecar.name.removesuffix(".points.json")
        out_path = sidecar.with_name(name + ".yaml")
    return write_outputs(
        data,
        out_path,
        command=side.get("command") or "unknown",
        host=side.get("host"),
        derived_by=derived_by,
    )


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="python -m testbed.calibration.reassemble",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 written, 3 unreadable or invalid sidecar, 2 usage error.",
    )
    ap.add_argument(
        "sidecar", type=Path, help="the calibration sidecar (NAME.points.json) to derive from"
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="profile YAML to write (default: NAME.yaml beside the sidecar)",
    )
    a = ap.parse_args(args_list)
    cmd = shlex.join(["python", "-m", "testbed.calibration.reassemble", *args_list])
    try:
        reassemble(a.sidecar, a.out, derived_by=cmd)
    except MqbedError as e:
        print(f"reassemble: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
