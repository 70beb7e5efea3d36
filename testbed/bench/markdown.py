"""``docs/performance.md`` from the performance suite's document (see :mod:`testbed.bench.runner`).

A document people read: the machine in one line, then per area a paragraph of what it measures
and one table — figure, target, measured, ratio to its anchor, pass/fail, the command that
measured it. No raw output, except the tail of a benchmark that failed, and no path of the
machine it ran on.
"""

from __future__ import annotations

__all__ = ["kept_sections", "markdown", "machine_line", "scrub", "number"]

import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.bench.catalogue import SOURCES
from testbed.bench.figures import Figure
from testbed.core.broker_kinds import KINDS

_STATUS = {"pass": "pass", "fail": "**FAIL**", "no target": "–", "not judged": "not judged",
           "not measured": "not measured"}  # fmt: skip


def number(x: float) -> str:
    """Three significant digits, thousands separated: 25,815 · 326 · 13.6 · 1.07 · 0.141."""
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def scrub(text: str, root: Path) -> str:
    """`text` without this machine's paths: the repository becomes ``.``, the Python
    installation ``<python>``, the temporary directory ``<tmp>``, the home directory ``~``."""
    places = [(str(root), ".")]
    places += [(p, "<python>") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    places += [(tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "~")]
    for path, name in sorted(places, key=lambda p: -len(p[0])):
        if len(path) > 1:
            text = re.sub(re.escape(path) + r"(?=[/\s\"':,)\]]|$)", name, text, flags=re.M)
    return text


def machine_line(m: dict[str, Any]) -> str:
    parts = [m.get("cpu_model") or "unknown CPU", f"{m.get('cpus') or '?'} CPUs"]
    if m.get("memory_bytes"):
        parts.append(f"{m['memory_bytes'] / 2**30:.1f} GiB RAM")
    parts += [m.get("os") or "unknown OS", f"Python {m.get('python') or '?'}"]
    parts.append(f"mqbed {m.get('mqbed') or '?'}")
    for kind, version in (m.get("brokers") or {}).items():
        facts = KINDS.get(kind)
        parts.append(f"{facts.title if facts else kind} {version}")
    return ", ".join(parts)


def _row(f: Figure, command: str) -> str:
    target = f.target.label(f.unit) if f.target is not None else "–"
    if f.value is None:
        measured = f"not measured: {f.note or 'no reason given'}"
    else:
        measured = f"{number(f.value)} {f.unit}".rstrip() + (f" ({f.note})" if f.note else "")
    ratio = "–"
    if f.ratio is not None and f.anchor is not None:
        anchor = f"{number(f.anchor.value)} {f.unit}".rstrip()
        times = f"{f.ratio:.3f}" if f.ratio < 10 else number(f.ratio)  # 1.000 vs a ±1 % target
        ratio = f"{times} × {f.anchor.name} ({anchor})"
    cells = [f.name, target, measured, ratio, _STATUS[f.status], f"`{command}`"]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _fence(text: str) -> str:
    ticks = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, ticks + 1)
    return f"{fence}text\n{text}\n{fence}"


def _area(a: dict[str, Any]) -> list[str]:
    figures = [Figure.from_record(r) for r in a["figures"]]
    lines = [f"## {a['area']}: {a['title']}", "", a["what"], ""]
    lines += [
        "| figure | target | measured | ratio to anchor | pass/fail | command |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_row(f, a["command"]) for f in figures]
    lines.append("")
    sources = sorted({f.target.source for f in figures if f.target and f.target.source})
    if sources:
        lines += ["Targets: " + " ".join(f"*{s}*: {SOURCES.get(s, s)}" for s in sources), ""]
    when = f" on {a['date']}" if a.get("date") else ""
    run = f"The script: `{a['script']}`, {a['wall_s']:.0f} s wall, exit {a['exit']}{when}."
    if a.get("unreadable_records"):
        run += f" {len(a['unreadable_records'])} unreadable figure line(s) ignored."
    lines += [run, ""]
    if not a["ok"]:
        lines += [f"**Failed** (exit {a['exit']}); the end of its output:", "",
                  _fence(a.get("tail") or "(no output)"), ""]  # fmt: skip
    return lines


def _summary(s: dict[str, int]) -> str:
    text = f"{s['with_target']} figures with a target: {s['pass']} pass, {s['fail']} fail"
    if s.get("not_judged"):
        text += f", {s['not_judged']} not judged"
    text += f", {s['not_measured']} not measured"
    return text + f"; {s['figures'] - s['with_target']} more without a target."


def kept_sections(text: str, areas: Sequence[str]) -> dict[str, str]:
    """The ``## <area>: ...`` sections of an earlier report for `areas`, verbatim, by area: a
    run of some areas (``--only``) keeps the others' figures instead of dropping them."""
    parts = re.split(r"(?m)^(?=## )", text)
    out = {}
    for part in parts[1:]:
        name = part[3:].split(":", 1)[0].strip()
        if name in areas:
            out[name] = part.rstrip() + "\n"
    return out


def markdown(
    doc: dict[str, Any], kept: Mapping[str, str] | None = None, order: Sequence[str] = ()
) -> str:
    """The report of `doc`; `kept`: earlier sections of areas not run now, placed in `order`."""
    quick = " (quick: machinery check, not numbers)" if doc["quick"] else ""
    lines = [
        f"# mqbed performance figures{quick}",
        "",
        f"Written by `{doc['command']}` on {doc['date']}; the same command with `--json` prints "
        "these figures as one JSON document. Each area is one script of `tests/bench/`, run "
        "alone (they would measure each other). A ratio is the measured value ÷ its anchor, "
        'the baseline named beside it, and a target "× anchor" applies to that ratio. The '
        "figures are one machine's and noisy: re-measure before quoting.",
        "",
        f"**Machine:** {machine_line(doc['machine'])}.",
        "",
        f"**Summary:** {_summary(doc['summary'])}",
        "",
    ]
    if doc.get("failed"):
        lines += [f"**Failed benchmarks:** {', '.join(doc['failed'])}.", ""]
    kept = dict(kept or {})
    if kept:
        lines += [
            f"Areas not run by this command, as an earlier run wrote them (see each one's "
            f"command): {', '.join(kept)}. The summary counts the areas run now.",
            "",
        ]
    fresh = {a["area"]: a for a in doc["areas"]}
    for name in [*order, *(n for n in fresh if n not in order)]:
        if name in fresh:
            lines += _area(fresh[name])
        elif name in kept:
            lines += [kept[name]]
    return "\n".join(lines).rstrip() + "\n"
