"""The scenario schema reference (``docs/scenario.md``), generated from the pydantic models.

    python -m testbed.core.schema_doc            # print the reference
    python -m testbed.core.schema_doc --write    # rewrite docs/scenario.md
    python -m testbed.core.schema_doc --check    # exit 1 when docs/scenario.md is stale

Every model reachable from :class:`~testbed.core.scenario.Scenario` gets a section with its
docstring and one row per field: name (the YAML key), type, default, constraints and the field's
docstring. The models are the single source: the unit tests fail when the committed file
differs from what this module renders.

pydantic keeps field docstrings only with ``use_attribute_docstrings``, which the scenario
models do not set, so they are read here from the class source with :mod:`ast` (a few lines;
no library renders pydantic models as Markdown tables).
"""

from __future__ import annotations

__all__ = ["DOC_PATH", "render", "main"]

import argparse
import ast
import functools
import inspect
import json
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from testbed.core import scenario as scenario_module
from testbed.core import units
from testbed.core.scenario import Scenario, SizeDistribution, TimeDistribution

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "scenario.md"
COMMAND = "python -m testbed.core.schema_doc --write"

_QUANTITIES = {
    units.parse_duration: "duration",
    units.parse_rate: "rate",
    units.parse_size: "size",
    units.parse_bandwidth: "bandwidth",
}
_DIST_CONVERTERS = {
    typing.get_args(TimeDistribution)[2].func: "distribution of durations",
    typing.get_args(SizeDistribution)[2].func: "distribution of sizes",
}
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_BOUNDS = ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"), (at.Lt, "lt", "<"))


# --- docstrings ---------------------------------------------------------------------------------


def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of ``cls`` and its bases: the string literal after a field."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            out.update(_own_field_docs(klass))
    return out


@functools.cache
def _own_field_docs(klass: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out[prev.target.id] = inspect.cleandoc(node.value.value)
    return out


def _prose(text: str) -> str:
    """A docstring as Markdown: RST roles and double backticks become plain code spans."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def _cell(text: str) -> str:
    """Text fit for one table cell: one line, pipes and would-be HTML tags escaped."""
    flat = " ".join(_prose(text).split())
    return _TAG.sub("&lt;", flat.replace("|", "\\|"))


# --- types --------------------------------------------------------------------------------------


def _split(tp: Any) -> tuple[Any, list[Any]]:
    """(bare type, metadata) of a possibly ``Annotated`` type; FieldInfo metadata is flattened."""
    meta: list[Any] = []
    while typing.get_origin(tp) is typing.Annotated:
        base, *extra = typing.get_args(tp)
        for item in extra:
            if isinstance(item, FieldInfo):
                meta.extend(item.metadata)
            else:
                meta.append(item)
        tp = base
    return tp, meta


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _type_name(tp: Any, meta: list[Any]) -> str:
    """A reader's name for a field type: quantities, distributions, literals, links."""
    for item in meta:
        func = getattr(item, "func", None)
        if func in _QUANTITIES:
            return _QUANTITIES[func]
        if func in _DIST_CONVERTERS:
            return f"{_DIST_CONVERTERS[func]} ([distribution](#distributions))"
    tp, inner = _split(tp)
    if inner:
        return _type_name(tp, inner)
    if typing.get_origin(tp) is typing.Literal:
        values = [f"`{json.dumps(v)}`" for v in typing.get_args(tp)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    args = _union_args(tp)
    if args is not None:
        parts = [a for a in args if a is not type(None)]
        if all(_is_model(_split(a)[0]) for a in parts) and len(parts) > 2:
            names = ", ".join(_type_name(a, []) for a in parts)
            return f"one of {names}"
        text = " or ".join(_type_name(a, []) for a in parts)
        return text + (" or null" if len(parts) < len(args) else "")
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp)
        return f"list of {_type_name(item, [])}"
    if _is_model(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _constraints(meta: list[Any]) -> str:
    out: list[str] = []
    for item in meta:
        for cls, attr, sign in _BOUNDS:
            if isinstance(item, cls):
                bound = getattr(item, attr)
                out.append(f"{sign} {bound}" if isinstance(bound, int) else f"{sign} {bound:g}")
        if isinstance(item, at.MinLen):
            out.append(f"length ≥ {item.min_length}")
        if isinstance(item, at.MaxLen):
            out.append(f"length ≤ {item.max_length}")
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            out.append(f"matches `{pattern}`")
    return ", ".join(out)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        cls = type(value)
        if _constructible(cls) and value == cls():
            return f"the defaults of {cls.__name__}"
        value = value.model_dump(mode="json", exclude_none=True)
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _constructible(cls: type[BaseModel]) -> bool:
    return all(not f.is_required() for f in cls.model_fields.values())


# --- models -------------------------------------------------------------------------------------


def _models(tp: Any, seen: dict[type[BaseModel], None], meta: list[Any] | None = None) -> None:
    """Every model reachable from ``tp``, depth first in field order, into ``seen``."""
    tp, inner = _split(tp)
    meta = (meta or []) + inner
    if any(getattr(m, "func", None) in _DIST_CONVERTERS for m in meta):
        return  # distributions get their own section
    if _is_model(tp):
        if tp in seen:
            return
        seen[tp] = None
        for info in tp.model_fields.values():
            if not info.exclude:
                _models(info.annotation, seen, list(info.metadata))
        return
    for arg in typing.get_args(tp):
        _models(arg, seen)


def _section(cls: type[BaseModel], level: str = "##") -> list[str]:
    docs = _field_docs(cls)
    lines = [f"{level} {cls.__name__}", ""]
    own = cls.__dict__.get("__doc__")
    if own:
        lines += [_prose(inspect.cleandoc(own)), ""]
    lines += ["| field | type | default | constraints | description |", "|---|---|---|---|---|"]
    for name, info in cls.model_fields.items():
        if info.exclude:
            continue
        key = info.alias or name
        kind = _type_name(info.annotation, list(info.metadata))
        row = (f"`{key}`", kind, _default(info), _constraints(list(info.metadata)))
        lines.append("| " + " | ".join(_cell(c) for c in (*row, docs.get(name, ""))) + " |")
    return lines + [""]


def _distribution_models() -> list[type[BaseModel]]:
    union, _ = _split(TimeDistribution)
    return [a for a in typing.get_args(_split(union)[0]) if _is_model(a)]


def render() -> str:
    """The whole reference as Markdown."""
    seen: dict[type[BaseModel], None] = {}
    _models(Scenario, seen)
    head = [
        "# Scenario file reference",
        "",
        f"<!-- Generated from the models in testbed/core/; do not edit: run `{COMMAND}`. -->",
        "",
        _prose(inspect.cleandoc(scenario_module.__doc__ or "")),
        "",
        "## Units",
        "",
        _prose(inspect.cleandoc(units.__doc__ or "").split("\n\n")[1]),
        "",
        "Every quantity is converted to base units at load: seconds, messages per second, bytes.",
        "",
        "The models follow, starting with the top level of a file. A *duration*, *rate* or *size*",
        "takes a quantity with units as above. Distributions are at the end.",
        "",
    ]
    body: list[str] = []
    for cls in seen:
        body += _section(cls)
    dists = [
        "## Distributions",
        "",
        "Service times, think times and message sizes take a distribution: a mapping with",
        "a `kind` and that kind's fields, or a bare quantity (`5ms`: deterministic 5 ms;",
        "`1KB`: fixed 1000 bytes). In a distribution of durations the fields `mean`, `sd`,",
        "`value`, `low`, `high`, `mean1`, `mean2` and `values` take durations and",
        "`rate`/`rates` take rates; in a distribution of sizes they take sizes. The fields",
        "below are in base units. See",
        "docs/models.md §2 for the moment matching of `fit`.",
        "",
    ]
    for cls in _distribution_models():
        dists += _section(cls, "###")
    return "\n".join(head + body + dists).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.core.schema_doc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the usage lines as written
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"rewrite {DOC_PATH.name}")
    group.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {DOC_PATH}")
        return 0
    if args.check:
        current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
        if current != text:
            print(f"docs/scenario.md is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
