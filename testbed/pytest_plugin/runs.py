"""``mqbed_run``'s work: a scenario with overrides, one live run, its analysis, the result.

Overrides (keyword arguments of ``mqbed_run``) change a copy of the scenario, never the file:

- ``duration``, ``warmup``, ``drain_timeout``, ``seed``, ``name``: the top-level fields (a bare
  number of seconds, or ``"5s"``);
- ``rate``: ``arrival.rate`` of every producer group (``"300/s"`` or a number per second; as
  the scenario writes it, per producer instance);
- ``producers`` / ``consumers``: ``count`` of every group (an int), or of the groups named in a
  mapping (``{"orders": 3}``);
- ``set``: any other field, as ``mqbed sweep --set`` paths: ``{"consumers[workers].prefetch":
  50}``;
- ``replications``, ``workers``, ``predict`` (default True), ``report`` (default True: the
  Spark analysis, which gives the summary and the verdicts), ``profile``.
"""

from __future__ import annotations

__all__ = ["MqbedResult", "apply_overrides", "scenario_copy", "set_fields", "OVERRIDES"]

import copy
import io
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from testbed.core.records import Ledger
from testbed.exceptions import ConfigurationError

FIELDS = ("duration", "warmup", "drain_timeout", "seed", "name")
RUN_OPTIONS = ("replications", "workers", "predict", "report", "profile")
OVERRIDES = (*FIELDS, "rate", "producers", "consumers", "set", *RUN_OPTIONS)


@dataclass
class MqbedResult:
    """What one ``mqbed_run`` produced.

    `ledger` sums the replications' ledgers (`ledgers`: one per replication). `summary` is
    ``analysis/summary.json`` (None with ``report=False``); `verdicts` its rows
    (`testbed.report.verdict.VerdictRow`: measured, predicted, error, target, within).
    """

    run_dir: Path
    scenario_file: Path
    backend: str
    ledgers: list[Ledger] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    report: Path | None = None

    @property
    def ledger(self) -> Ledger:
        total = Ledger()
        for led in self.ledgers:
            for f in fields(Ledger):
                setattr(total, f.name, getattr(total, f.name) + getattr(led, f.name))
        return total

    @property
    def verdicts(self) -> list[Any]:
        from testbed.report.verdict import verdict_rows

        return verdict_rows(self.summary) if self.summary else []

    def measured(self, metric: str, queue: str | None = None) -> float | None:
        """The measured value of a ``summary.json`` metric (``latency_p95_s``, ...) for the
        whole run (`queue` None) or one queue; None when the analysis has no such entry."""
        for e in (self.summary or {}).get("metrics", []):
            if e.get("metric") == metric and e.get("queue") == queue:
                value = e.get("measured")
                return None if value is None else float(value)
        return None

    def verdict_table(self, width: int = 110) -> str:
        """The verdict table as ``mqbed run`` prints it, as plain text."""
        from rich.console import Console

        from testbed.report.verdict import print_verdict

        if self.summary is None:
            return f"no analysis (report=False); run directory {self.run_dir}"
        buffer = io.StringIO()
        console = Console(width=width, color_system=None, file=buffer)
        print_verdict(self.summary, console)
        return buffer.getvalue().rstrip()


def _groups(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    groups = data.get(key) or []
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise ConfigurationError(f"override: the scenario's {key} is not a list of groups")
    return groups


def _counts(data: dict[str, Any], key: str, value: int | Mapping[str, int]) -> None:
    groups = _groups(data, key)
    if isinstance(value, Mapping):
        names = {g.get("name") for g in groups}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ConfigurationError(
                f"override {key}={dict(value)!r}: no {key} group named {unknown} "
                f"(have {sorted(n for n in names if n)})"
            )
        for g in groups:
            if g.get("name") in value:
                g["count"] = value[g["name"]]
        return
    for g in groups:
        g["count"] = value


def _rate(data: dict[str, Any], value: Any) -> None:
    for g in _groups(data, "producers"):
        arrival = g.get("arrival")
        if not isinstance(arrival, dict) or "rate" not in arrival:
            kind = arrival.get("kind") if isinstance(arrival, dict) else arrival
            raise ConfigurationError(
                f"override rate={value!r}: producer group {g.get('name')!r} has arrival "
                f"{kind!r} without a rate; set its fields with set={{...}} instead"
            )
        arrival["rate"] = value


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of scenario `data` with the scenario-field `overrides` applied (see the
    module docstring; run options such as ``predict`` are not handled here)."""
    from testbed.sweep import set_path

    out = copy.deepcopy(data)
    for key, value in overrides.items():
        if key in FIELDS:
            out[key] = value
        elif key == "rate":
            _rate(out, value)
        elif key in ("producers", "consumers"):
            _counts(out, key, value)
        elif key == "set":
            for path, v in dict(value).items():
                out = set_path(out, path, v)
        elif key not in RUN_OPTIONS:
            raise TypeError(f"mqbed_run: unknown override {key!r} (known: {', '.join(OVERRIDES)})")
    return out


def scenario_copy(
    source: Path | Mapping[str, Any], target_dir: Path, overrides: Mapping[str, Any]
) -> Path:
    """Write the scenario (a file, or its data as a mapping) with `overrides` applied to
    ``target_dir/scenario.yaml``; trace files it names are copied beside it (a trace path is
    relative to the scenario's directory)."""
    if isinstance(source, Mapping):
        data, base = dict(source), None
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigurationError(f"mqbed_run: scenario file {path} not found")
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"mqbed_run: {path} is not a scenario (a YAML mapping)")
        data, base = loaded, path.resolve().parent
        data.setdefault("name", path.stem)
    data = apply_overrides(data, overrides)
    target_dir.mkdir(parents=True, exist_ok=True)
    if base is not None:
        for g in data.get("producers") or []:
            arrival = g.get("arrival") if isinstance(g, dict) else None
            if isinstance(arrival, dict) and arrival.get("kind") == "trace" and arrival.get("file"):
                rel = Path(str(arrival["file"]))
                if not rel.is_absolute() and (base / rel).is_file():
                    (target_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(base / rel, target_dir / rel)
    out = target_dir / "scenario.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return out


def set_fields(path: Path, values: Mapping[str, Any]) -> None:
    """Set fields (``mqbed sweep --set`` paths) of the scenario file `path` in place."""
    from testbed.sweep import set_path

    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key, value in values.items():
        data = set_path(data, key, value)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
