"""The figure protocol: how a benchmark script hands its figures to `mqbed bench`.

A script of ``tests/bench/`` prints its human-readable output as before and, for every figure,
one line on stdout::

    mqbed-figure {"record": "figure", "area": "workload", "key": "workload.generator_pika",
                  "figure": "Locust worker ÷ bare pika loop (RabbitMQ)", "unit": "msg/s",
                  "value": 25815.0, "anchor": {"name": "bare pika loop", "value": 24180.0},
                  "ratio": 1.0676, "target": {"op": ">=", "bound": 0.8, "of": "ratio", ...},
                  "pass": true, "judged": true, "note": null}

(one line in reality). ``value`` is null when the figure was not measured (``note`` says why);
``judged`` is false when the run cannot speak to the target (``--quick`` runs shorter
variants). A script may also print ``mqbed-figure {"record": "broker", "kind": "rabbitmq",
"version": "3.10.8"}`` for a broker it measured. :func:`parse` reads these lines out of a
script's stdout and keeps every other line; the verdict (``pass``) is always recomputed here
from the target, so a script and the document cannot disagree.
"""

from __future__ import annotations

__all__ = ["PREFIX", "Target", "Anchor", "Figure", "Parsed", "parse", "figure_line"]

import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

PREFIX = "mqbed-figure "

Op = Literal["<", "<=", ">", ">=", "within", "check"]
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_SHOWN = {"<": "<", "<=": "≤", ">": ">", ">=": "≥"}


@dataclass(frozen=True)
class Target:
    """What a figure must meet. ``of`` says whether the bound applies to the measured value or
    to its ratio to the anchor; ``within`` means ``|ratio − 1| ≤ bound``; ``check`` is a
    yes/no outcome the script decides (``text`` says what), e.g. intervals that overlap.
    ``source`` names where the target comes from."""

    op: Op
    bound: float | None = None
    of: Literal["value", "ratio"] = "value"
    text: str = ""
    source: str = ""

    def label(self, unit: str = "") -> str:
        if self.op == "check":
            return self.text
        assert self.bound is not None
        if self.op == "within":
            return f"within ±{100 * self.bound:g} % of anchor"
        bound = f"{self.bound:,g}"
        if self.of == "ratio":
            return f"{_SHOWN[self.op]} {bound} × anchor"
        return f"{_SHOWN[self.op]} {bound} {unit}".rstrip()

    def met(self, value: float, ratio: float | None, ok: bool | None) -> bool | None:
        if self.op == "check":
            return ok
        x = ratio if self.of == "ratio" or self.op == "within" else value
        if x is None or self.bound is None:
            return None
        if self.op == "within":
            return abs(x - 1.0) <= self.bound + 1e-12  # 990 / 1000 is within 1 %
        return _COMPARE[self.op](x, self.bound)

    def record(self) -> dict[str, Any]:
        return {"op": self.op, "bound": self.bound, "of": self.of, "text": self.text,
                "source": self.source}  # fmt: skip

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Target:
        bound = d.get("bound")
        return cls(d["op"], None if bound is None else float(bound), d.get("of", "value"),
                   d.get("text", ""), d.get("source", ""))  # fmt: skip


@dataclass(frozen=True)
class Anchor:
    """What a figure is compared with, in the figure's own unit (a bare client loop, a peer)."""

    name: str
    value: float


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass(frozen=True)
class Figure:
    area: str
    key: str
    name: str
    unit: str
    value: float | None
    target: Target | None = None
    anchor: Anchor | None = None
    note: str | None = None
    judged: bool = True
    ok: bool | None = None
    """A ``check`` target's outcome, decided by the script."""

    @property
    def ratio(self) -> float | None:
        if self.anchor is None or self.value is None or not self.anchor.value:
            return None
        return _finite(self.value / self.anchor.value)

    @property
    def passed(self) -> bool | None:
        """True/False against the target; None without a target, value or judgement."""
        if self.target is None or self.value is None or not self.judged:
            return None
        return self.target.met(self.value, self.ratio, self.ok)

    @property
    def status(self) -> str:
        if self.value is None:
            return "not measured"
        if self.target is None:
            return "no target"
        if not self.judged:
            return "not judged"
        return {True: "pass", False: "fail", None: "not judged"}[self.passed]

    def record(self) -> dict[str, Any]:
        return {
            "record": "figure",
            "area": self.area,
            "key": self.key,
            "figure": self.name,
            "unit": self.unit,
            "value": self.value,
            "anchor": None if self.anchor is None else vars(self.anchor).copy(),
            "ratio": self.ratio,
            "target": None if self.target is None else self.target.record(),
            "ok": self.ok,
            "pass": self.passed,
            "status": self.status,
            "judged": self.judged,
            "note": self.note,
        }

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Figure:
        """The inverse of `record` (``ratio``, ``pass`` and ``status`` are recomputed)."""
        a, t = d.get("anchor"), d.get("target")
        value = d.get("value")
        return cls(
            area=str(d["area"]),
            key=str(d["key"]),
            name=str(d["figure"]),
            unit=str(d.get("unit", "")),
            value=None if value is None else _finite(float(value)),
            target=None if t is None else Target.from_record(t),
            anchor=None if a is None else Anchor(str(a["name"]), float(a["value"])),
            note=d.get("note"),
            judged=bool(d.get("judged", True)),
            ok=d.get("ok"),
        )

    def unmeasured(self, why: str) -> Figure:
        return Figure(self.area, self.key, self.name, self.unit, None, self.target, None, why)


def figure_line(fig: Figure) -> str:
    """The stdout line a script prints for `fig` (strict JSON: no NaN)."""
    return PREFIX + json.dumps(fig.record(), ensure_ascii=False, allow_nan=False)


@dataclass
class Parsed:
    figures: list[Figure] = field(default_factory=list)
    brokers: dict[str, str] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)
    """Every line that is no record (the script's human output), in order."""
    bad: list[str] = field(default_factory=list)
    """Lines that start with the prefix but hold no valid record (reported, never fatal)."""


def parse(text: str) -> Parsed:
    """Figures and broker versions out of a script's stdout; other lines are kept as they are.
    A later record of the same key replaces an earlier one."""
    out = Parsed()
    by_key: dict[str, Figure] = {}
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            out.other.append(line)
            continue
        try:
            d = json.loads(line[len(PREFIX) :])
            if d.get("record") == "broker":
                out.brokers[str(d["kind"])] = str(d["version"])
            else:
                fig = Figure.from_record(d)
                by_key[fig.key] = fig
        except (ValueError, KeyError, TypeError, AttributeError):
            out.bad.append(line)
    out.figures = list(by_key.values())
    return out
