"""YAML loading that remembers where every value came from, with limits for hostile input.

``load_with_lines(text)`` returns the plain Python data (as ``yaml.safe_load`` would) and a
``LineMap`` from field paths (tuples of keys and list indices) to 1-based line numbers, so that
validation errors can point at ``file:line``. Every problem is a :class:`YamlProblem` with a
line (and a field path where one is known); nothing else escapes.

Why PyYAML plus a small hand-written constructor rather than another library: PyYAML's
composer already gives a node graph whose every node carries its line, and it shares alias
targets (an alias is the same node object, so composing is linear in the file). What no
maintained Python YAML library offers (PyYAML, ruamel.yaml) is a budget: they expand aliases
into nested objects without a bound ("billion laughs"), recurse once per nesting level (20,000
``[`` is a RecursionError) and follow recursive aliases (``&x [*x]``). The limits have to sit
between composing and constructing, which is this module:

- nesting deeper than ``MAX_DEPTH`` is refused while composing (before Python's recursion limit)
  and again while constructing (a chain of aliases can nest deeper than the text);
- at most ``MAX_NODES`` values, counted while composing and again while constructing, where an
  alias counts as a full copy: the validator walks every copy, so sharing them would only move
  the blow-up;
- a recursive alias is refused by name;
- the merge key ``<<`` (YAML 1.1) is supported: the mapping's own keys win, then the merged
  mappings in order;
- only the plain YAML tags: ``!!python/object`` and friends are refused, as are integers beyond
  64 bits and non-finite floats (the scenario model converts numbers to floats).

Duplicate keys are errors here (PyYAML silently keeps the last one, which hides typos in long
scenario files). Plain ``on``/``off``/``yes``/``no`` as keys stay names. libyaml's C parser
produces the events when it is available (the pure-Python scanner needs ~20 s per MiB).
"""

from __future__ import annotations

__all__ = [
    "LineMap",
    "YamlProblem",
    "DuplicateKeyError",
    "load_with_lines",
    "format_path",
    "MAX_DEPTH",
    "MAX_NODES",
]

import math
from collections.abc import Sequence
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

PathKey = tuple[str | int, ...]

MAX_DEPTH = 64
MAX_NODES = 50_000
_INT_LIMIT = 1 << 64

_TAG = "tag:yaml.org,2002:"
_MERGE_TAG = _TAG + "merge"
_BOOL_TAG = _TAG + "bool"
_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null", "timestamp", "binary")}


class YamlProblem(ValueError):
    """A problem in the YAML text: `line` is 1-based, `path` the field it belongs to."""

    def __init__(self, message: str, line: int, path: PathKey = ()):
        self.line = line
        self.path = path
        super().__init__(message)


class DuplicateKeyError(YamlProblem):
    def __init__(self, path: PathKey, key: str, line: int, first_line: int):
        self.key = key
        self.first_line = first_line
        super().__init__(f"duplicate key {key!r} (first defined on line {first_line})", line, path)


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


def _line(node_or_mark: Any) -> int:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return int(getattr(mark, "line", 0)) + 1


_Parser: Any
try:
    from yaml._yaml import CParser as _Parser
except ImportError:  # PyYAML built without libyaml: slower, same results
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _PyParser(Reader, Scanner, Parser):
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)

    _Parser = _PyParser


class _BoundedComposer(Composer, _Parser, Resolver):  # type: ignore[misc,valid-type]
    """PyYAML's composer over libyaml's events, refusing deep nesting and too many nodes."""

    def __init__(self, text: str) -> None:
        _Parser.__init__(self, text)
        Composer.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise YamlProblem(
                f"more than {MAX_NODES} values; a scenario is far smaller", _line(mark)
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep", _line(mark))
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _Builder:
    """Nodes -> Python data, recording lines, with the node budget counted over alias copies."""

    def __init__(self, lines: LineMap) -> None:
        self.lines = lines
        self.count = 0
        self.open: set[int] = set()  # ids of the nodes being built (to catch recursive aliases)
        self.scalars = SafeConstructor()

    def build(self, node: yaml.Node, path: PathKey, depth: int) -> Any:
        line = _line(node)
        self.count += 1
        if self.count > MAX_NODES:
            raise YamlProblem(
                f"more than {MAX_NODES} values once aliases are expanded (an alias bomb?)",
                line,
                path,
            )
        if depth > MAX_DEPTH:
            raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep (through aliases)", line)
        if id(node) in self.open:
            raise YamlProblem("recursive alias: a value contains itself", line, path)
        self.lines.add(path, line)
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if node.tag not in (_TAG + "map", _TAG + "seq"):
            raise YamlProblem(f"tag {node.tag!r} is not allowed; use plain YAML", line, path)
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path, depth)
            return [self.build(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def mapping(self, node: yaml.MappingNode, path: PathKey, depth: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        first: dict[Any, int] = {}
        merges: list[tuple[int, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append((_line(key_node), value_node))
                continue
            key = self.key(key_node, path)
            kline = _line(key_node)
            if key in first:
                raise DuplicateKeyError(path + (key,), str(key), kline, first[key])
            first[key] = kline
            self.lines.add(path + (key,), kline)
            result[key] = self.build(value_node, path + (key,), depth + 1)
        for mline, merged in merges:  # YAML 1.1 merge: own keys win, then earlier merges
            sources = merged.value if isinstance(merged, yaml.SequenceNode) else [merged]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise YamlProblem(
                        "a merge key '<<' takes a mapping or a list of mappings "
                        "(e.g. '<<: *defaults')",
                        mline,
                        path,
                    )
                for key, value in self.build(source, path, depth).items():
                    result.setdefault(key, value)
        return result

    def key(self, node: yaml.Node, path: PathKey) -> Any:
        """A mapping key. YAML 1.1 reads plain `on`/`off`/`yes`/`no` as booleans; as keys they
        are names (``follow_ups: [{on: Order, ...}]``), so keep the text as written."""
        if not isinstance(node, yaml.ScalarNode):
            raise YamlProblem("a mapping key must be a plain value", _line(node), path)
        if node.tag == _BOOL_TAG and not node.style:
            return node.value
        return self.scalar(node, path)

    def scalar(self, node: yaml.ScalarNode, path: PathKey) -> Any:
        line = _line(node)
        if node.tag not in _SCALAR_TAGS:
            raise YamlProblem(f"tag {node.tag!r} is not allowed; use plain YAML", line, path)
        if node.tag == _TAG + "int" and len(node.value) > 40:
            raise YamlProblem("integer is too large (more than 64 bits)", line, path)
        try:
            value = self.scalars.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, ArithmeticError, TypeError) as e:
            problem = getattr(e, "problem", None) or str(e)
            message = f"bad {node.tag.removeprefix(_TAG)} value: {problem}"
            raise YamlProblem(message, line, path) from None
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _INT_LIMIT:
            raise YamlProblem("integer is too large (more than 64 bits)", line, path)
        if isinstance(value, float) and not math.isfinite(value):
            raise YamlProblem(f"number {node.value[:40]!r} is not finite", line, path)
        return value


def _syntax_problem(e: yaml.YAMLError, text: str) -> YamlProblem:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        line = _line(mark)
    else:  # a ReaderError (e.g. a control character) has only a position
        position = int(getattr(e, "position", 0) or 0)
        line = text.count("\n", 0, position) + 1
    problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
    return YamlProblem(f"not valid YAML: {problem}", line)


def load_with_lines(text: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; raise only :class:`YamlProblem` (DuplicateKeyError is one)."""
    lines = LineMap()
    try:
        composer = _BoundedComposer(text)
        try:
            node = composer.get_single_node()
        finally:
            composer.dispose()
    except yaml.YAMLError as e:
        raise _syntax_problem(e, text) from None
    if node is None:
        return None, lines
    return _Builder(lines).build(node, (), 0), lines
