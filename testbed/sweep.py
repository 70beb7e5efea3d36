"""Parameter sweeps: one scenario, a grid of settings, a live run + prediction per point,
and curves with the saturation point and the SLA capacity.

    sweep(Path("workloads/scenarios/quickstart.yaml"), ["producers[0].count=1:4:1"],
          home=Path(".mqbed"), out_dir=Path("runs"))          # -> runs/<utc>-sweep-quickstart/

``--set PATH=SPEC`` (repeatable; several make a Cartesian grid):

- PATH is a dotted path into the scenario's YAML data; ``[i]`` indexes a list and
  ``[name]`` picks the list item whose ``name`` is ``name``:
  ``producers[0].count``, ``producers[orders].arrival.rate``, ``consumers[workers].prefetch``.
- SPEC is ``start:stop:step`` (inclusive; the numbers may carry one unit, ``50/s:200/s:50/s``,
  ``5ms:20ms:5ms``) or a comma list (``1,2,5,10``). Values are read as YAML scalars.

Every point is validated with :func:`testbed.core.scenario_loader.parse_scenario` before any
run starts (all errors at once), named ``<scenario>-pNN`` and written to
``<sweep>/points/NN.yaml``; its run goes to ``<sweep>/runs/``. The first ``--set`` is the x
axis of the curves; the other settings split the points into series.

Output in the sweep directory: ``sweep.json`` (points, per-series curves, saturation and SLA
capacity, measured and predicted) and ``sweep.html``; each run also gets its own report, and
``runs/runs-summary.{html,md}`` tabulates them.
"""

from __future__ import annotations

__all__ = ["Axis", "GridPoint", "parse_set", "parse_path", "set_path", "expand_grid", "sweep"]

import itertools
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from testbed.core.overrides import parse_path, set_path
from testbed.core.safe_read import InputRefused, read_text_file
from testbed.core.yamlmap import YamlProblem, format_path, load_with_lines
from testbed.exceptions import ConfigurationError, ScenarioError, ScenarioIssue

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")
MAX_POINTS = 1000


@dataclass(frozen=True)
class Axis:
    """One ``--set``: a path and the values it takes."""

    path: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class GridPoint:
    """One point of the grid: the settings and the scenario data with them applied."""

    index: int
    settings: dict[str, Any]
    data: dict[str, Any]


def _read_scenario_data(path: Path) -> Any:
    """The file's YAML data through the scenario loader's safe reader and bounded parser (a
    regular file, size and alias limits); a problem is a ScenarioError naming file and line."""
    try:
        data, _ = load_with_lines(read_text_file(path))
    except InputRefused as e:
        raise ScenarioError([ScenarioIssue(str(path), e.line, "", str(e))]) from None
    except YamlProblem as e:
        issue = ScenarioIssue(str(path), e.line, format_path(e.path), str(e))
        raise ScenarioError([issue]) from None
    return data


def _scalar(text: str) -> Any:
    try:
        value, _ = load_with_lines(text)
    except YamlProblem:
        return text
    return text if isinstance(value, dict | list) or value is None else value


def _range(path: str, spec: str, parts: list[str]) -> tuple[Any, ...]:
    matches = [_NUMBER.match(p) for p in parts]
    if not all(matches):
        raise ConfigurationError(
            f"--set {path}={spec}: start:stop:step needs numbers (with one unit), "
            f"e.g. 5:40:5 or 50/s:200/s:50/s"
        )
    numbers = [float(m.group(1)) for m in matches if m]
    units = {m.group(2) for m in matches if m and m.group(2)}
    if len(units) > 1:
        raise ConfigurationError(f"--set {path}={spec}: mixed units {sorted(units)}")
    start, stop, step = numbers
    if step <= 0 or stop < start:
        raise ConfigurationError(
            f"--set {path}={spec}: need step > 0 and stop ≥ start (got step {step:g})"
        )
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_POINTS:
        raise ConfigurationError(f"--set {path}={spec}: {count} values (max {MAX_POINTS})")
    unit = units.pop() if units else ""
    values = [start + i * step for i in range(count)]
    integral = not unit and all(float(n).is_integer() for n in numbers)
    if integral:
        return tuple(int(round(v)) for v in values)
    return tuple(f"{round(v, 12):g}{unit}" if unit else round(v, 12) for v in values)


def parse_set(text: str) -> Axis:
    """``path=start:stop:step`` or ``path=v1,v2,...`` → Axis."""
    path, sep, spec = text.partition("=")
    path, spec = path.strip(), spec.strip()
    if not sep or not path or not spec:
        raise ConfigurationError(
            f"--set {text!r}: expected PATH=START:STOP:STEP or PATH=V1,V2,... "
            "(e.g. producers[0].count=5:40:5)"
        )
    parse_path(path)
    parts = spec.split(":")
    if len(parts) == 3:
        return Axis(path, _range(path, spec, parts))
    if len(parts) != 1:
        raise ConfigurationError(f"--set {text!r}: a range is START:STOP:STEP (three parts)")
    values = tuple(_scalar(v.strip()) for v in spec.split(",") if v.strip())
    if not values:
        raise ConfigurationError(f"--set {text!r}: no values")
    return Axis(path, values)


def expand_grid(data: dict[str, Any], axes: list[Axis]) -> list[GridPoint]:
    """Every combination of the axes' values (the first axis varies slowest)."""
    if not axes:
        raise ConfigurationError("a sweep needs at least one --set")
    points = []
    combos = list(itertools.product(*(a.values for a in axes)))
    if len(combos) > MAX_POINTS:
        raise ConfigurationError(f"the grid has {len(combos)} points (max {MAX_POINTS})")
    for i, combo in enumerate(combos):
        point = data
        settings = {}
        for axis, value in zip(axes, combo, strict=True):
            point = set_path(point, axis.path, value)
            settings[axis.path] = value
        points.append(GridPoint(i, settings, point))
    return points


def _absolute_files(data: Any, base: Path) -> Any:
    """Relative ``file:`` references made absolute (points are written elsewhere)."""
    if isinstance(data, dict):
        return {
            k: (
                str((base / v).resolve())
                if k == "file" and isinstance(v, str) and not Path(v).is_absolute()
                else _absolute_files(v, base)
            )
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_absolute_files(v, base) for v in data]
    return data


def validate_points(scenario_path: Path, points: list[GridPoint]) -> list[str]:
    """Each point as YAML text, named ``<name>-pNN``; raises ScenarioError with every issue."""
    from testbed.core.scenario_loader import parse_scenario

    texts: list[str] = []
    issues: list[ScenarioIssue] = []
    for p in points:
        data = _absolute_files(p.data, scenario_path.parent)
        data["name"] = f"{data.get('name') or scenario_path.stem}-p{p.index:02d}"
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        label = ", ".join(f"{k}={v}" for k, v in p.settings.items())
        scenario, found = parse_scenario(text, f"{scenario_path} [{label}]", scenario_path.parent)
        issues.extend(i for i in found if i.severity == "error")
        if scenario is None and not found:
            raise ConfigurationError(f"{scenario_path} [{label}] is not a valid scenario")
        texts.append(text)
    if issues:
        raise ScenarioError(issues)
    return texts


def sweep(
    scenario_path: Path,
    sets: list[str],
    *,
    home: Path,
    out_dir: Path,
    replications: int = 1,
    predict: bool = True,
    spark_master: str | None = None,
    sla_p95: float = 0.1,
    min_gain: float = 0.5,
    console: Console | None = None,
    profile: Path | None = None,
) -> Path:
    """Run the grid live (+ predicted), analyse, write ``sweep.json``/``sweep.html``; returns
    the sweep directory. `sla_p95` is the p95 latency target in seconds; `profile` the
    calibration profile of every point's prediction (as ``mqbed run --profile``)."""
    from testbed.report.build import build_report
    from testbed.report.sweep_page import sweep_document, write_sweep_page
    from testbed.run import run_scenario

    console = console or Console(stderr=True, emoji=False)
    scenario_path = Path(scenario_path)
    data = _read_scenario_data(scenario_path)
    if not isinstance(data, dict):
        raise ConfigurationError(f"{scenario_path} is not a scenario mapping")
    axes = [parse_set(s) for s in sets]
    points = expand_grid(data, axes)
    texts = validate_points(scenario_path, points)
    name = data.get("name") or scenario_path.stem
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    root = Path(out_dir) / f"{stamp}-sweep-{name}"
    (root / "points").mkdir(parents=True, exist_ok=False)
    run_dirs = []
    for point, text in zip(points, texts, strict=True):
        f = root / "points" / f"{point.index:02d}.yaml"
        f.write_text(text, encoding="utf-8")
        label = ", ".join(f"{k}={v}" for k, v in point.settings.items())
        console.print(f"sweep point {point.index + 1}/{len(points)}: {label}", markup=False)
        result = run_scenario(
            f,
            home=home,
            out_dir=root / "runs",
            replications=replications,
            predict=predict,
            console=console,
            profile=profile,
        )
        run_dirs.append(result.run_dir)
    build_report(run_dirs, spark_master=spark_master, console=console)
    summaries = [
        json.loads((d / "analysis" / "summary.json").read_text(encoding="utf-8")) for d in run_dirs
    ]
    doc = sweep_document(
        scenario=str(name),
        axes=axes,
        points=points,
        run_dirs=run_dirs,
        summaries=summaries,
        sla_p95=sla_p95,
        min_gain=min_gain,
        root=root,
    )
    (root / "sweep.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    write_sweep_page(doc, root / "sweep.html")
    console.print(f"sweep written to {root}", markup=False)
    return root
