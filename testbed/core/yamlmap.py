"""YAML loading that remembers where every value came from.

``load_with_lines(text)`` returns the plain Python data (as ``yaml.safe_load`` would) and a
``LineMap`` from field paths (tuples of keys and list indices) to 1-based line numbers, so that
validation errors can point at ``file:line``. Duplicate keys are errors here (PyYAML silently
keeps the last one, which hides typos in long scenario files).
"""

from __future__ import annotations

__all__ = ["LineMap", "DuplicateKeyError", "load_with_lines", "format_path"]

from collections.abc import Sequence
from typing import Any

import yaml

PathKey = tuple[str | int, ...]


class DuplicateKeyError(ValueError):
    def __init__(self, path: PathKey, key: str, line: int, first_line: int):
        self.path = path
        self.key = key
        self.line = line
        self.first_line = first_line
        super().__init__(f"duplicate key {key!r} (first defined on line {first_line})")


class LineMap:
    """Field path -> line, with fallback to the nearest ancestor that has a line."""

    def __init__(self) -> None:
        self._lines: dict[PathKey, int] = {}

    def add(self, path: PathKey, line: int) -> None:
        self._lines.setdefault(path, line)

    def line(self, path: Sequence[str | int]) -> int | None:
        p = tuple(path)
        while True:
            if p in self._lines:
                return self._lines[p]
            if not p:
                return None
            p = p[:-1]


def format_path(path: Sequence[str | int]) -> str:
    """('consumers', 0, 'prefetch') -> 'consumers[0].prefetch'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _construct(node: yaml.Node, path: PathKey, lines: LineMap) -> Any:
    lines.add(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = _construct_key(key_node)
            if key == "<<":
                raise yaml.YAMLError(
                    f"line {key_node.start_mark.line + 1}: YAML merge keys ('<<') are not supported"
                )
            kline = key_node.start_mark.line + 1
            if key in first:
                raise DuplicateKeyError(path + (key,), str(key), kline, first[key])
            first[key] = kline
            child = path + (key,)
            lines.add(child, kline)
            result[key] = _construct(value_node, child, lines)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, path + (i,), lines) for i, item in enumerate(node.value)]
    return _construct_scalar(node)


_CONSTRUCTOR = yaml.SafeLoader("")
_BOOL_TAG = "tag:yaml.org,2002:bool"


def _construct_key(node: yaml.Node) -> Any:
    """A mapping key. YAML 1.1 reads plain `on`/`off`/`yes`/`no` as booleans; as keys they are
    names (``follow_ups: [{on: Order, ...}]``), so keep the text as written."""
    if isinstance(node, yaml.ScalarNode) and node.tag == _BOOL_TAG and not node.style:
        return node.value
    return _construct_scalar(node)


def _construct_scalar(node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.YAMLError(
            f"line {node.start_mark.line + 1}: a mapping key must be a plain value"
        )
    return _CONSTRUCTOR.construct_object(node, deep=True)


def load_with_lines(text: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; raise ``yaml.YAMLError`` or ``DuplicateKeyError``."""
    lines = LineMap()
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None, lines
    return _construct(node, (), lines), lines
