"""Settings applied to a scenario's YAML data before it is validated: ``--set PATH=VALUE`` (run
and sweep) and the run's load shorthands ``--rate``, ``--duration``, ``--producers`` and
``--consumers`` (as Locust's ``-u``/``-t`` and RabbitMQ PerfTest's ``-r``/``-z``/``-x``/``-y``).

PATH is a dotted path into the data; ``[i]`` indexes a list and ``[name]`` picks the list item
whose ``name`` is ``name``: ``producers[0].count``, ``consumers[workers].prefetch``. A value that
breaks the schema is reported by the loader like any other scenario error, with the file's line
and the override named beside the file.
"""

from __future__ import annotations

__all__ = ["RunOverrides", "parse_path", "set_path"]

import copy
import re
from dataclasses import dataclass
from typing import Any

import yaml

from testbed.exceptions import ConfigurationError

_TOKEN = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")
_RATED = ("poisson", "constant")


def parse_path(path: str) -> list[str | int]:
    """``producers[0].arrival.rate`` → ``["producers", 0, "arrival", "rate"]``; a bracket
    that is not a number stays a string (a list item chosen by ``name``)."""
    tokens: list[str | int] = []
    pos = 0
    for m in _TOKEN.finditer(path):
        between = path[pos : m.start()]
        if between not in ("", "."):
            raise ConfigurationError(f"--set path {path!r}: cannot read {between!r}")
        key, index = m.group(1), m.group(2)
        if key is not None:
            tokens.append(key)
        else:
            index = index.strip()
            if not index:
                raise ConfigurationError(f"--set path {path!r}: empty []")
            tokens.append(int(index) if re.fullmatch(r"-?\d+", index) else f"[{index}]")
        pos = m.end()
    if pos != len(path) or not tokens or not isinstance(tokens[0], str):
        raise ConfigurationError(f"--set path {path!r} is not a dotted path like a.b[0].c")
    return tokens


def _child(node: Any, token: str | int, path: str) -> Any:
    if isinstance(token, int):
        if not isinstance(node, list) or not -len(node) <= token < len(node):
            size = len(node) if isinstance(node, list) else "not a list"
            raise ConfigurationError(f"--set {path}: index [{token}] out of range ({size})")
        return node[token]
    if token.startswith("["):
        name = token[1:-1]
        found = (
            [x for x in node if isinstance(x, dict) and x.get("name") == name]
            if isinstance(node, list)
            else []
        )
        if not found:
            raise ConfigurationError(f"--set {path}: no list item named {name!r}")
        return found[0]
    if not isinstance(node, dict):
        raise ConfigurationError(f"--set {path}: {token!r} is below a non-mapping value")
    return node.setdefault(token, {})


def set_path(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `data` with `value` at `path` (missing mapping keys are created)."""
    out = copy.deepcopy(data)
    tokens = parse_path(path)
    node: Any = out
    for token in tokens[:-1]:
        node = _child(node, token, path)
    last = tokens[-1]
    if isinstance(last, int):
        _child(node, last, path)  # range check
        node[last] = value
    elif last.startswith("["):
        target = _child(node, last, path)
        node[next(i for i, item in enumerate(node) if item is target)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigurationError(f"--set {path}: {last!r} is below a non-mapping value")
    return out


@dataclass(frozen=True)
class RunOverrides:
    """What ``mqbed run`` changes in the scenario (nothing when every field is empty)."""

    sets: tuple[str, ...] = ()
    """``PATH=VALUE`` settings; VALUE is read as a YAML scalar (``50/s``, ``3``, ``true``)."""
    rate: str | None = None
    """Every producer instance's rate (poisson and constant arrivals, or the shorthand)."""
    duration: str | None = None
    producers: int | None = None
    """Instances in every producer group."""
    consumers: int | None = None
    """Instances in every consumer group."""

    def __bool__(self) -> bool:
        return bool(self.label())

    def label(self) -> str:
        """The options as given, for messages: ``--set seed=7 --rate 50/s``."""
        out = [f"--set {s}" for s in self.sets]
        for name in ("rate", "duration", "producers", "consumers"):
            value = getattr(self, name)
            if value is not None:
                out.append(f"--{name} {value}")
        return " ".join(out)

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        """A copy of the scenario data with the overrides applied (ConfigurationError when one
        cannot be: a path that does not exist, ``--rate`` on an mmpp arrival, ...)."""
        for text in self.sets:
            path, sep, value = text.partition("=")
            if not sep or not path.strip():
                raise ConfigurationError(f"--set {text!r}: expected PATH=VALUE, e.g. seed=7")
            data = set_path(data, path.strip(), _scalar(value.strip()))
        if self.duration is not None:
            data = set_path(data, "duration", self.duration)
        for group, count in (("producers", self.producers), ("consumers", self.consumers)):
            if count is not None:
                for i in range(len(_items(data, group))):
                    data = set_path(data, f"{group}[{i}].count", count)
        if self.rate is not None:
            data = self._with_rate(data, self.rate)
        return data

    @staticmethod
    def _with_rate(data: dict[str, Any], rate: str) -> dict[str, Any]:
        for i, p in enumerate(_items(data, "producers")):
            arrival = p.get("arrival") if isinstance(p, dict) else None
            if isinstance(arrival, dict):
                kind = arrival.get("kind")
                if kind not in _RATED:
                    raise ConfigurationError(
                        f"--rate {rate}: producers[{i}] ({p.get('name')}) has a {kind} arrival, "
                        f"which has no single rate; use --set producers[{i}].arrival...."
                    )
                data = set_path(data, f"producers[{i}].arrival.rate", rate)
            else:  # the shorthand `arrival: 50/s` (Poisson), or missing (the loader says so)
                data = set_path(data, f"producers[{i}].arrival", rate)
        return data


def _items(data: dict[str, Any], group: str) -> list[Any]:
    items = data.get(group)
    return items if isinstance(items, list) else []


def _scalar(text: str) -> Any:
    value = yaml.safe_load(text) if text else ""
    return text if isinstance(value, dict | list) or value is None else value
