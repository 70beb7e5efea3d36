"""Load scenario files: YAML with line numbers -> pydantic -> cross-field checks.

Every problem becomes a :class:`~testbed.exceptions.ScenarioIssue` that names the file, line,
field path and offending value, with a "did you mean" where a name was misspelt. All issues of
a file are reported together; warnings (e.g. an unstable configuration) do not stop a load.
Hostile files (alias bombs, deep nesting, FIFOs, devices, huge or non-UTF-8 files) are refused
with an issue too: see ``safe_read`` and ``yamlmap`` for the limits.
"""

from __future__ import annotations

__all__ = ["load_scenario", "validate_file", "parse_scenario"]

import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from testbed.core.overrides import RunOverrides
from testbed.core.safe_read import InputRefused, read_text_file
from testbed.core.scenario import Scenario
from testbed.core.scenario_checks import check_scenario
from testbed.core.scenario_units import FIELD_HINTS, RESOLVED_HEADER, check_units
from testbed.core.suggest import did_you_mean
from testbed.core.yamlmap import LineMap, YamlProblem, format_path, load_with_lines
from testbed.exceptions import ScenarioError, ScenarioIssue

_QUOTED = re.compile(r"'([^']*)'")


def _real_path(
    data: Any, loc: Sequence[str | int], keep_missing_key: bool = False
) -> list[str | int]:
    """Map a pydantic error location onto the user's data, dropping union-tag segments."""
    path: list[str | int] = []
    node = data
    tag_skipped: Any = None
    for part in loc:
        if (
            isinstance(node, dict)
            and tag_skipped is not node
            and part in (node.get("kind"), node.get("policy"))
        ):
            # the union's tag (a latency toxic's 'latency'), not its field of the same name
            tag_skipped = node
            continue
        if (
            isinstance(node, dict)
            and part in node
            or isinstance(node, list)
            and isinstance(part, int)
            and 0 <= part < len(node)
        ):
            node = node[part]  # type: ignore[index]
            path.append(part)
        elif isinstance(node, dict) and isinstance(part, str) and part in ("from_",):
            path.append("from")
            node = node.get("from")
        # else: a union tag ('poisson'), 'function-after[...]' etc.: not in the user's file
    # keep a trailing missing key so the message says which field is missing
    if keep_missing_key and loc and isinstance(loc[-1], str) and (not path or path[-1] != loc[-1]):
        last = loc[-1]
        if isinstance(node, dict) and not last.startswith(("function-", "union[")):
            path.append(last)
    return path


def _descend(t: Any, part: str | int) -> Any:
    """The type found at `part` below type `t` (model field, list item, union member by tag)."""
    while get_origin(t) is Annotated:
        t = get_args(t)[0]
    origin = get_origin(t)
    if origin in (Union, types.UnionType):
        members = [m for m in get_args(t) if m is not type(None)]
        if isinstance(part, str):
            for m in members:
                if _tag_matches(m, part):
                    return m
        for m in members:
            found = _descend(m, part)
            if found is not None:
                return found
        return None
    if origin is list and isinstance(part, int):
        return get_args(t)[0]
    if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
        for name, field in t.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
    return None


def _tag_matches(model: Any, tag: str) -> bool:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return False
    for key in ("kind", "policy"):
        field = model.model_fields.get(key)
        if field is not None and tag in get_args(field.annotation):
            return True
    return False


def _known_fields(loc: Sequence[str | int]) -> list[str]:
    """Field names (aliases) of the model that rejected the unknown key at `loc`."""
    t: Any = Scenario
    for part in loc[:-1]:
        t = _descend(t, part)
        if t is None:
            return []
    while get_origin(t) in (Annotated, Union, types.UnionType):
        args = [a for a in get_args(t) if a is not type(None)]
        t = args[0]
    if isinstance(t, type) and issubclass(t, BaseModel):
        return [f.alias or n for n, f in t.model_fields.items()]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*): ")


def _field_in_message(data: Any, path: list[str | int], msg: str) -> tuple[list[str | int], str]:
    """A model-level message that starts with ``field: `` is about that field: point at it."""
    node: Any = data
    for part in path:
        node = node[part] if isinstance(node, dict | list) else None  # type: ignore[index]
    m = _FIELD_PREFIX.match(msg)
    if m and isinstance(node, dict) and m.group(1) in node:
        return [*path, m.group(1)], msg[m.end() :]
    return path, msg


def _issues_from_validation(
    err: ValidationError, data: Any, lines: LineMap, file: str
) -> list[ScenarioIssue]:
    issues: list[ScenarioIssue] = []
    seen: set[tuple[str, str]] = set()
    for e in err.errors(include_url=False):
        loc = list(e["loc"])
        ctx = e.get("ctx") or {}
        etype = e["type"]
        value = e.get("input")
        path = _real_path(data, loc, keep_missing_key=etype == "missing")
        if etype == "extra_forbidden":
            key = str(loc[-1])
            choices = _known_fields(loc)
            hint = FIELD_HINTS.get(key)
            msg = f"unknown field {key!r}" + (f": {hint}" if hint else did_you_mean(key, choices))
            issues.append(ScenarioIssue(file, lines.line(path), format_path(path), msg))
            continue
        if etype == "literal_error":
            choices = _QUOTED.findall(str(ctx.get("expected", "")))
            msg = (
                f"{_short(value)} is not allowed; expected {ctx.get('expected')}"
                f"{did_you_mean(str(value), choices)}"
            )
        elif etype == "union_tag_invalid" and "tag" not in ctx:
            path = _real_path(data, loc) + ["kind"]
            msg = str(e["msg"])
        elif etype == "union_tag_invalid":
            key = str(ctx.get("discriminator", "kind")).strip("'")
            path = _real_path(data, loc) + [key]
            tag = ctx.get("tag")
            choices = _QUOTED.findall(str(ctx.get("expected_tags", "")))
            msg = f"unknown {key} {tag!r}{did_you_mean(str(tag), choices)}; expected one of " + (
                ", ".join(choices)
            )
        elif etype == "union_tag_not_found":
            key = str(ctx.get("discriminator", "kind")).strip("'")
            msg = f"missing {key!r}: say which kind this is"
        elif etype == "missing":
            msg = "required field is missing"
        elif etype in ("value_error", "assertion_error"):
            msg = str(e["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
            path, msg = _field_in_message(data, path, msg)
        else:
            msg = f"{e['msg']} (got {_short(value)})"
        where = format_path(path)
        if (where, msg) in seen:
            continue
        seen.add((where, msg))
        issues.append(ScenarioIssue(file, lines.line(path), where, msg))
    return issues


def parse_scenario(
    text: str,
    file: str = "<scenario>",
    base_dir: Path | None = None,
    overrides: RunOverrides | None = None,
) -> tuple[Scenario | None, list[ScenarioIssue]]:
    """Parse and validate scenario text. Returns (Scenario or None, issues incl. warnings).

    `overrides` change the data before validation; issues then name the file as
    ``FILE [--rate 50/s]`` and keep the file's line numbers."""
    try:
        data, lines = load_with_lines(text)
    except YamlProblem as e:
        return None, [ScenarioIssue(file, e.line, format_path(e.path), str(e))]
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        return None, [
            ScenarioIssue(file, 1, "", f"a scenario must be a mapping of fields, got {kind}")
        ]
    if overrides:
        data = overrides.apply(data)
        file = f"{file} [{overrides.label()}]"
    if "name" not in data:
        data = {"name": Path(file).stem if file != "<scenario>" else "scenario", **data}
    unit_issues = [] if text.startswith(RESOLVED_HEADER) else check_units(data, lines, file)
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as err:
        issues = unit_issues + _issues_from_validation(err, data, lines, file)
        return None, sorted(issues, key=lambda i: (i.line or 0, i.path))
    issues = unit_issues + check_scenario(scenario, data, lines, file, base_dir or Path("."))
    issues.sort(key=lambda i: (i.severity != "error", i.line or 0, i.path))
    if any(i.severity == "error" for i in issues):
        return None, issues
    return scenario, issues


def validate_file(
    path: str | Path, overrides: RunOverrides | None = None
) -> tuple[Scenario | None, list[ScenarioIssue]]:
    """Validate one file; never raises for content problems (they come back as issues).

    Only a regular UTF-8 file of at most 1 MiB is read (a FIFO or device is refused unopened)."""
    p = Path(path)
    try:
        text = read_text_file(p)
    except InputRefused as e:
        return None, [ScenarioIssue(str(path), e.line, "", str(e))]
    return parse_scenario(text, str(path), p.parent, overrides)


def load_scenario(path: str | Path, overrides: RunOverrides | None = None) -> Scenario:
    """Load a valid scenario or raise :class:`ScenarioError` listing every error."""
    scenario, issues = validate_file(path, overrides)
    errors = [i for i in issues if i.severity == "error"]
    if scenario is None or errors:
        raise ScenarioError(errors or issues)
    return scenario
