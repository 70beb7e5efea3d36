"""The accuracy suite's judgement and its document: what a miss is, the totals across cases,
and ``docs/accuracy.md`` (an overview table, then every case's rows and checks).

Kept apart from :mod:`testbed.accuracy`, which runs the cases: this module only reads the
suite's JSON document.
"""

from __future__ import annotations

__all__ = ["misses", "accuracy_misses", "totals", "markdown", "kept_notes", "shown_command"]

import json
import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
"""The repository: what documents show paths relative to."""


def shown_command(argv: list[str]) -> str:
    """A command line as documents show it: an absolute path inside the repository relative to
    it, one elsewhere (a ``--home`` in the temporary directory) as ``<its name>``; documents
    never hold an absolute path of the machine."""

    def arg(a: str) -> str:
        key, eq, value = a.partition("=") if a.startswith("--") else ("", "", a)
        if not value.startswith("/"):
            return a
        p = Path(value).resolve()
        shown = str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else f"<{p.name}>"
        return f"{key}{eq}{shown}"

    return shlex.join([arg(a) for a in argv])


def misses(case: dict[str, Any]) -> list[str]:
    """Whole-run metrics of a judged case that are outside their target *and* outside the
    measured interval (noise alone cannot make a miss), and failed case checks."""
    out = [
        f"{r['metric']}"
        for r in case.get("rows", [])
        if r.get("queue") is None
        and r.get("within_target") is False
        and r.get("inside_measured_ci") is not True
    ]
    out += [f"check: {c['check']}" for c in case.get("checks", []) if c.get("ok") is False]
    if case.get("error"):
        out.append("error")
    return out


def accuracy_misses(json_path: Path) -> list[str]:
    """``case: metric, ...`` for every case of a written suite that missed, and every failed
    check across two cases (``pairs``)."""
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    out = [f"{c['case']}: {', '.join(misses(c))}" for c in doc.get("cases", []) if misses(c)]
    return out + [f"pair: {p['check']}" for p in doc.get("pairs", []) if p.get("ok") is False]


def totals(cases: list[dict[str, Any]], pairs: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Across cases: whole-run metrics within target and inside the measured interval; the
    checks across two cases that passed."""
    rows = [r for c in cases for r in c.get("rows", []) if r.get("queue") is None]
    judged = [r for r in rows if r.get("within_target") is not None]
    with_ci = [r for r in rows if r.get("inside_measured_ci") is not None]
    ks = [r["predicted"] for r in rows if r["metric"] == "latency_ks"]
    return {
        "metrics": len(judged),
        "within_target": sum(bool(r["within_target"]) for r in judged),
        "with_interval": len(with_ci),
        "inside_interval": sum(bool(r["inside_measured_ci"]) for r in with_ci),
        "worst_ks": max(ks) if ks else None,
        "cases_missing": [c["case"] for c in cases if misses(c)],
        "pairs": len([p for p in pairs if p.get("ok") is not None]),
        "pairs_ok": sum(p.get("ok") is True for p in pairs),
    }


def _fmt(v: Any, metric: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, bool):
        return "✓" if v else "✗"
    if isinstance(v, float):
        if metric.startswith("latency") and metric.endswith("_s"):
            return f"{v * 1e3:.3g} ms"
        return f"{v:.4g}"
    if isinstance(v, dict):  # a check's sides, e.g. the saturation point measured / predicted
        return ", ".join(f"{k} {_fmt(x, metric)}" for k, x in v.items())
    return str(v)


def _target(r: dict[str, Any]) -> str:
    t = r.get("target")
    if t is None:
        return "in CI"
    kind = r.get("target_kind")
    if kind == "pearson_r":
        return f"r ≥ {t:g}"
    if kind == "max_distance":
        return f"≤ {t:g}"
    if kind == "max_w1_rel_mean":
        return f"≤ {100 * t:g} % of mean"
    return f"±{t:g} msg" if kind == "abs_error_msgs" else f"±{100 * t:g} %"


PRODUCED_BY = "Produced by `"


def kept_notes(old_markdown: str) -> str:
    """The hand-written part of an accuracy document — what follows its title and precedes the
    generated ``Produced by`` line (the state of the document, the log of accuracy sessions) —
    so that a run of the suite rewrites the tables and keeps the notes."""
    lines = old_markdown.splitlines()
    end = next((i for i, line in enumerate(lines) if line.startswith(PRODUCED_BY)), None)
    if end is None or not lines or not lines[0].startswith("# "):
        return ""
    return "\n".join(lines[1:end]).strip()


def markdown(doc: dict[str, Any], expected: Sequence[str] = (), notes: str = "") -> str:
    """The document; ``notes`` (see ``kept_notes``) go between the title and the tables."""
    h = doc.get("host") or {}
    host = f"{h.get('name', '?')}, {h.get('cpus', '?')} CPUs, " + (
        f"{h['memory_bytes'] / 2**30:.0f} GiB" if h.get("memory_bytes") else "? GiB"
    )
    quick = " (quick: machinery check, not numbers)" if doc["quick"] else ""
    quick += " — interrupted, cases that finished only" if doc.get("interrupted") else ""
    lines = [f"# Prediction accuracy{quick}", ""] + ([notes, ""] if notes else [])
    lines += [
        f"{PRODUCED_BY}{doc['command']}` on {doc['date']} ({host}; a case re-run alone names its "
        f"own command); {doc['replications']} replication(s) per scenario, each predicted with "
        "the profile its section names. Relative error = (predicted − measured) / measured; "
        "“in CI” = the prediction lies inside the measured 95 % interval.",
        "",
    ]
    lines += _overview(doc, expected)
    for c in doc["cases"]:
        lines += [f"## {c['case']} (`{c['scenario']}`)", ""]
        if c.get("profile"):
            lines += [f"Profile: {c['profile']}.", ""]
        if c.get("rejudged"):
            lines += ["Judged again (`--reuse`): the live runs and predictions in its run "
                      "directory were kept, the analysis rebuilt.", ""]  # fmt: skip
        if c.get("error"):
            lines += [f"**Failed:** {c['error']}", ""]
            continue
        if c.get("rows"):
            lines += ["| metric | queue | measured | 95 % CI | predicted | error | target | "
                      "within | in CI |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
            for r in c["rows"]:
                ci = r.get("measured_ci") or [None, None]
                err = r.get("rel_error")
                lines.append(
                    f"| {r['metric']} | {r['queue'] or 'all'} | {_fmt(r['measured'], r['metric'])}"
                    f" | {_fmt(ci[0], r['metric'])}–{_fmt(ci[1], r['metric'])}"
                    f" | {_fmt(r['predicted'], r['metric'])}"
                    f" | {'–' if err is None else f'{100 * err:+.1f} %'} | {_target(r)}"
                    f" | {_fmt(r['within_target'])} | {_fmt(r['inside_measured_ci'])} |"
                )
            lines.append("")
        for ch in c.get("checks", []):
            lines.append(f"- **{ch['check']}**: {_fmt(ch['value'])} (target {ch['target']}) "
                         f"{_fmt(ch['ok'])} {ch['note']}".rstrip())  # fmt: skip
        own = f" `{c['command']}`, {c.get('date', '')}." if c.get("command") else ""
        where = c.get("run_dir") or c.get("sweep_dir")
        lines += ["", f"Wall time {c['wall_s']} s.{own}" + (f" Runs: `{where}`." if where else ""),
                  ""]  # fmt: skip
    return "\n".join(lines) + "\n"


def _overview(doc: dict[str, Any], expected: Sequence[str]) -> list[str]:
    """The suite in one table: per case, whole-run metrics within target and inside the
    measured interval, the latency KS distance, and what missed."""
    t = doc.get("totals") or totals(doc["cases"])
    pct = lambda a, b: f"{a} of {b} ({100 * a / b:.0f} %)" if b else "–"  # noqa: E731
    lines = [
        "## Overview",
        "",
        f"Whole-run metrics within target: {pct(t['within_target'], t['metrics'])}; inside the "
        f"measured 95 % interval: {pct(t['inside_interval'], t['with_interval'])}; worst latency "
        f"KS distance {_fmt(t['worst_ks'])}"
        + (
            f"; checks across two cases passed: {t['pairs_ok']} of {t['pairs']}."
            if t.get("pairs")
            else "."
        ),
        "",
        "| case | within target | inside CI | latency KS | misses (outside target and CI) |",
        "|---|---|---|---|---|",
    ]
    done = {c["case"] for c in doc["cases"]}
    missing = [name for name in expected if name not in done]
    for c in doc["cases"]:
        rows = [r for r in c.get("rows", []) if r.get("queue") is None]
        judged = [r for r in rows if r.get("within_target") is not None]
        ci = [r for r in rows if r.get("inside_measured_ci") is not None]
        ks = next((r["predicted"] for r in rows if r["metric"] == "latency_ks"), None)
        lines.append(
            f"| {c['case']} | {sum(bool(r['within_target']) for r in judged)}/{len(judged)}"
            f" | {sum(bool(r['inside_measured_ci']) for r in ci)}/{len(ci)} | {_fmt(ks)}"
            f" | {', '.join(misses(c)) or '–'} |"
        )
    if missing:
        lines += ["", f"Not run for this document ({len(missing)}): " + "; ".join(missing) + "."]
    return [*lines, "", *_pairs(doc.get("pairs") or [])]


def _pairs(pairs: Sequence[dict[str, Any]]) -> list[str]:
    """Checks across two cases of one broker (`testbed.accuracy_checks.pair_checks`)."""
    if not pairs:
        return []
    lines = ["Across two cases of one broker:", ""]
    for p in pairs:
        note = f"; {p['note']}" if p.get("note") else ""
        lines.append(f"- **{p['check']}**: {_fmt(p['value'])} (target: {p['target']}{note}) "
                     f"{_fmt(p['ok'])}")  # fmt: skip
    return [*lines, ""]
