"""`mqbed bench --suite accuracy`: the scenario library run, predicted, judged (docs/models.md §10).

Each case runs one library scenario through the whole pipeline (`run_scenario` with its paired
prediction on this machine's calibration profile — measured first when there is none, or as
``--calibration`` says — then the Spark analysis) — or, for the
closed-loop saturation case, a sweep — and collects from ``analysis/summary.json`` per metric:
the measured median with its 95 % interval, the prediction, the relative error, the target and
whether the prediction lies inside the measured interval. Case-specific checks come on top
(`testbed.accuracy_checks`): publish/subscribe fan-out latency, SPECjms2007 per-type median
latency, exact ledgers under deterministic faults, order violations in and out of order, the
elastic pool's claim, the saturation point within one sweep step; and checks across two cases
of one broker (the QoS BE − PC gap, in order against out of order).

Results go to ``docs/accuracy.json`` (a machine reads it) and ``docs/accuracy.md``; with
``--only`` the named cases replace theirs in an existing JSON and the others are kept (each
case records the command and date that produced it). ``--reuse --out DIR`` judges the run
directories of an earlier suite again — the analysis and report are rebuilt (after a change
to the analysis), the live runs and predictions are kept. Run directories (with their
``report.html``) are kept under ``runs/accuracy-<utc>/``. ``--quick``
shortens every scenario and uses one replication and a three-point sweep: it checks the
machinery, not the numbers (CI runs it; a missed target never fails it, a broken run does).
"""

from __future__ import annotations

__all__ = ["CASES", "AccuracyCase", "run_accuracy", "accuracy_misses", "all_cases", "misses"]

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from testbed.accuracy_checks import (
    check,
    elastic_checks,
    fanout_check,
    ledger_check,
    order_check,
    pair_checks,
    per_type_check,
)
from testbed.accuracy_doc import (
    accuracy_misses,
    kept_notes,
    markdown,
    misses,
    totals,
)
from testbed.core.broker_kinds import DEFAULT_KIND, KINDS
from testbed.observe.environment import environment

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "workloads" / "scenarios"


@dataclass(frozen=True)
class AccuracyCase:
    name: str
    scenario: str
    """File name in ``workloads/scenarios/``."""
    checks: tuple[str, ...] = ()
    """Extra checks (`testbed.accuracy_checks`): ``fanout``, ``per_type``, ``ledger_exact``,
    ``in_order``, ``out_of_order``, ``elastic``, ``saturation``."""
    sweep: tuple[str, ...] = ()
    """``--set`` axes: the case is a sweep."""
    brokers: tuple[str, ...] = ()
    """The brokers it runs on when not the default (RabbitMQ, and ActiveMQ per ``ACTIVEMQ``):
    the tandem's thread counts are ActiveMQ's ``threads`` model."""
    quick_sweep: tuple[str, ...] = ()
    sweep_replications: int = 1
    """Live replications per sweep point: the saturation point is read from the curve, whose
    per-point intervals come from a block bootstrap over windows; 3 per point would triple an
    already 8-point run."""
    quick: dict[str, Any] = field(default_factory=dict)
    """Overrides for ``--quick`` (dotted paths, as ``--set``)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Always applied (dotted paths): the broker or client library of a variant."""
    folder: str = "scenarios"
    """``workloads/<folder>/``: ``scenarios`` (the library) or ``holdout`` (scenarios written
    to check that nothing was tuned to the library; never used for calibration)."""

    @property
    def path(self) -> Path:
        return ROOT / "workloads" / self.folder / self.scenario

    def on(self, kind: str, client: str | None = None) -> AccuracyCase:
        """The same case on another broker (or client library)."""
        over = {**self.overrides, "broker.kind": kind}
        label = kind if client is None else f"{kind}/{client}"
        if client is not None:
            over["broker.client"] = client
        return replace(self, name=f"{self.name} [{label}]", overrides=over)


_SHORT = {"duration": "12s", "warmup": "2s"}

CASES: tuple[AccuracyCase, ...] = (
    AccuracyCase("quickstart", "quickstart.yaml", quick=_SHORT),
    AccuracyCase("fan-out 1→10", "fanout-1to10.yaml", ("fanout",), quick=_SHORT),
    AccuracyCase(
        "SPECjms2007 interaction 1",
        "specjms2007-interaction1.yaml",
        ("per_type",),
        quick={"duration": "20s", "warmup": "2s"},
    ),
    AccuracyCase("SPECjms2007 interaction 3", "specjms2007-interaction3.yaml", quick=_SHORT),
    AccuracyCase("visibility timeout, p=0.1", "vt-retries-p0.1.yaml", quick=_SHORT),
    AccuracyCase("visibility timeout, p=0.2", "vt-retries-p0.2.yaml", quick=_SHORT),
    AccuracyCase("broker kill under PCM", "faults-broker-kill-pcm.yaml", ("ledger_exact",)),
    AccuracyCase(
        "closed-loop saturation sweep",
        "closed-loop-saturation.yaml",
        ("saturation",),
        sweep=("producers[0].count=5:40:5",),
        quick_sweep=("producers[0].count=2:6:2",),
        quick={"duration": "10s", "warmup": "2s"},
    ),
)
"""The library cases; scenarios added later (QoS, elastic ramp) join when their files exist."""

HOLDOUT_CASES: tuple[AccuracyCase, ...] = (
    AccuracyCase(
        "holdout: mixed sizes, prefetch 1", "mixed-prefetch1.yaml", folder="holdout", quick=_SHORT
    ),  # fmt: skip
    AccuracyCase(
        "holdout: three consumers, lognormal service",
        "lognormal-3c.yaml",
        folder="holdout",
        quick=_SHORT,
    ),  # fmt: skip
)
"""Scenarios in no file of the library (other rates, sizes, prefetch and service times):
accuracy must hold there as well as on the library's own cases."""

ACTIVEMQ = ("quickstart", "fanout", "specjms", "vt-retries", "broker-kill", "qos", "elastic",
            "closed-loop", "visibility-")  # fmt: skip
"""Library cases (by scenario file) that also run on ActiveMQ; every holdout case does too."""


def all_cases() -> list[AccuracyCase]:
    """Every case on RabbitMQ, those in ``ACTIVEMQ`` on ActiveMQ too (or the brokers a case
    names), and a kombu quickstart."""
    base = [c for c in (*CASES, *OPTIONAL_CASES, *HOLDOUT_CASES) if c.path.is_file()]
    out = [c.on(kind) for kind in KINDS for c in base if _runs_on(c, kind)]
    out += [CASES[0].on(DEFAULT_KIND, "kombu")]
    return out


def _runs_on(case: AccuracyCase, kind: str) -> bool:
    if case.brokers:
        return kind in case.brokers
    if kind == DEFAULT_KIND:
        return True
    return case.folder == "holdout" or any(k in case.scenario for k in ACTIVEMQ)


OPTIONAL_CASES: tuple[AccuracyCase, ...] = (
    AccuracyCase("QoS experiment, BE", "qos-be.yaml", quick=_SHORT),
    AccuracyCase("QoS experiment, PC", "qos-pc.yaml", quick=_SHORT),
    AccuracyCase("QoS experiment, PCM", "qos-pcm.yaml", quick=_SHORT),
    AccuracyCase("elastic ramp (500 msg/s, pool 1)", "elastic-ramp-500-pool1.yaml"),
    # the pool's claim is judged on the paper's configuration (2-slot hosts, the NPP-sized pool);
    # with 1-slot hosts a pool of 1 lets consumers wait (docs/models.md §7)
    AccuracyCase("elastic ramp (500 msg/s, NPP pool)", "elastic-ramp-500-npp.yaml", ("elastic",)),
    AccuracyCase("in-order delivery under failures", "visibility-in-order.yaml", ("in_order",)),
    AccuracyCase(
        "out-of-order delivery under failures", "visibility-out-of-order.yaml", ("out_of_order",)
    ),  # fmt: skip
    AccuracyCase("tandem N1 = 1, N2 = 3", "tandem-n1-1-n2-3.yaml", brokers=("activemq",)),
)


def _scenario_text(case: AccuracyCase, quick: bool) -> str:
    from testbed.sweep import set_path

    data = yaml.safe_load(case.path.read_text(encoding="utf-8"))
    for path, value in case.overrides.items():
        data = set_path(data, path, value)
    kind = (data.get("broker") or {}).get("kind", DEFAULT_KIND)
    if not KINDS[kind].mandatory:  # qos-be on ActiveMQ: its drops vanish, counted as lost
        for producer in data.get("producers") or []:
            producer.pop("mandatory", None)
    data["name"] = f"{data['name']}-{_variant(case)}"
    if quick:
        for path, value in case.quick.items():
            data = set_path(data, path, value)
    return yaml.safe_dump(data, sort_keys=False)


def _shown(path: Path) -> str:
    """A run directory as documents show it: relative to the repository when inside it (the
    documents never hold an absolute path of the machine), else as given."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(path)


def _profile_text(p: dict[str, Any]) -> str:
    """Which profile predicted a case: its file (relative when in the repository) and where and
    when its client path was measured."""
    if not p:
        return ""
    path = p.get("path")
    shown = _shown(Path(path)) if path else p.get("source", "?")
    name = Path(shown).name if not str(shown).startswith(("deploy", "runs")) else shown
    cp = p.get("client_path") or {}
    measured = f", client path ({cp.get('client')}) measured {cp.get('date')}" if cp else ""
    if len(p.get("pooled") or ()) > 1:
        measured += f", pooled with {len(p['pooled']) - 1} earlier calibration(s) of the machine"
    if p.get("calibration_busy"):
        cores = p.get("foreign_cores")
        load = "unknown" if cores is None else f"{cores:.2f} cores"
        measured += f" **while other work kept the machine busy ({load})**"
    return f"`{name}` ({p.get('origin', '?')}){measured}"


def _variant(case: AccuracyCase) -> str:
    """``rabbitmq``, ``activemq`` or ``rabbitmq-kombu``: names the case's run and files."""
    kind = str(case.overrides.get("broker.kind", DEFAULT_KIND))
    client = case.overrides.get("broker.client")
    return kind if client is None else f"{kind}-{client}"


def _rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("metric", "queue", "measured", "measured_ci", "predicted", "rel_error", "target",
            "target_kind", "within_target", "inside_measured_ci", "pearson_r")  # fmt: skip
    return [{k: m.get(k) for k in keep} for m in summary.get("metrics", [])]


def _case_checks(case: AccuracyCase, run_dir: Path, rows: list[dict[str, Any]],
                 summary: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """The case's own checks (``AccuracyCase.checks``; `testbed.accuracy_checks`)."""
    checks = []
    if "fanout" in case.checks:
        checks.append(fanout_check(rows))
    if "per_type" in case.checks:
        checks += [per_type_check(run_dir), per_type_check(run_dir, "latency_p95_s")]
    if "ledger_exact" in case.checks:
        checks.append(ledger_check(summary))
    if "in_order" in case.checks or "out_of_order" in case.checks:
        checks.append(order_check(summary, in_order="in_order" in case.checks))
    if "elastic" in case.checks:
        checks += elastic_checks(run_dir)
    return checks


def _earlier(work: Path, case: AccuracyCase, text: str) -> Path | None:
    """The run (or sweep) directory of `case` in an earlier accuracy run's `work` directory."""
    name = yaml.safe_load(text)["name"]
    pattern = f"*-sweep-{name}" if case.sweep else f"*-{name}"
    found = sorted((work / "runs").glob(pattern))
    return found[-1] if found else None


def _run_case(case: AccuracyCase, *, quick: bool, reps: int, home: Path, work: Path,
              console: Console, reuse: bool = False,
              calibration: str = "auto") -> dict[str, Any]:  # fmt: skip
    from testbed.report.build import build_report
    from testbed.run import run_scenario
    from testbed.sweep import sweep

    f = work / f"{Path(case.scenario).stem}-{_variant(case)}.yaml"
    text = _scenario_text(case, quick)
    earlier = _earlier(work, case, text) if reuse else None
    if reuse and earlier is None:
        raise FileNotFoundError(f"no earlier run of {case.scenario} under {work / 'runs'}")
    if not reuse:
        f.write_text(text, encoding="utf-8")
    t0 = time.monotonic()
    out: dict[str, Any] = {"case": case.name, "scenario": case.scenario, "replications": reps}
    if reuse:
        out["rejudged"] = True  # live runs and predictions reused, analysis rebuilt
    if case.sweep:
        root = earlier or sweep(
            f, list(case.quick_sweep if quick else case.sweep), home=home, out_dir=work / "runs",
            replications=min(reps, case.sweep_replications), console=console,
        )  # fmt: skip
        out["replications"] = min(reps, case.sweep_replications)
        doc = json.loads((root / "sweep.json").read_text(encoding="utf-8"))
        out["sweep_dir"] = _shown(root)
        sat = doc.get("saturation") or {}
        xs = sorted({float(p["x"]) for p in doc.get("points", []) if "x" in p}) or [0.0, 1.0]
        step = min((b - a for a, b in zip(xs, xs[1:], strict=False)), default=1.0)
        m, p = sat.get("measured"), sat.get("predicted")
        if m and p:
            gap = abs(float(m["x"]) - float(p["x"]))
            value = {"measured": m["x"], "predicted": p["x"]}
            out["checks"] = [
                check("saturation point", f"within one step ({step:g})", value, gap <= step)
            ]
        else:
            out["checks"] = [check("saturation point", "within one step", {"measured": m,
                                    "predicted": p}, None, "not reached on one side")]  # fmt: skip
        out["rows"] = []
    else:
        run_dir = earlier or run_scenario(f, home=home, out_dir=work / "runs",
                                          replications=reps, predict=True,
                                          calibration=calibration,
                                          console=console).run_dir  # fmt: skip
        build_report([run_dir], console=console)
        summary = json.loads((run_dir / "analysis" / "summary.json").read_text())
        rows = _rows(summary)
        checks = _case_checks(case, run_dir, rows, summary)
        if summary.get("qos_loss"):  # for the BE − PC pair check (pair_checks)
            out["qos_loss"] = summary["qos_loss"]
        out["profile"] = _profile_text(summary.get("profile") or {})
        out.update(run_dir=_shown(run_dir), rows=rows, checks=checks,
                   verdict=summary.get("verdict"))  # fmt: skip
    out["wall_s"] = round(time.monotonic() - t0, 1)
    out["date"] = datetime.now(UTC).isoformat(timespec="seconds")
    return out


def run_accuracy(
    out_md: Path,
    *,
    quick: bool = False,
    only: list[str] | None = None,
    home: Path,
    runs_dir: Path | None = None,
    reuse: bool = False,
    replications: int | None = None,
    command: str = "mqbed bench --suite accuracy",
    progress: Callable[[str], None] = lambda _: None,
    console: Console | None = None,
    calibration: str = "auto",
) -> Path:
    """Run the cases (all, or those whose name or file contains an `only` entry); write
    ``out_md`` and the JSON beside it. Raises when a case's machinery breaks."""
    console = console or Console(stderr=True, quiet=True)
    reps = replications or (1 if quick else 3)
    cases = all_cases()
    if only:
        cases = [c for c in cases if any(o in c.name or o in c.scenario for o in only)]
    env = environment()
    doc: dict[str, Any] = {
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": env.get("host", {}),
        "replications": reps,
        "quick": quick,
        "cases": [],
    }
    failures = []
    work = runs_dir or ROOT / "runs" / f"accuracy-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        for i, case in enumerate(cases, 1):
            progress(f"[{i}/{len(cases)}] {case.name}")
            try:
                res = _run_case(case, quick=quick, reps=reps, home=home, work=work,
                                console=console, reuse=reuse,
                                calibration=calibration)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - recorded, then raised at the end
                res = {"case": case.name, "scenario": case.scenario, "error": repr(e),
                       "wall_s": None}  # fmt: skip
                failures.append(f"{case.name}: {e!r}")
            res["command"] = command
            doc["cases"].append(res)
    except KeyboardInterrupt:  # Ctrl-C: what finished is still written, then exit 130
        doc["interrupted"] = True
        _write(doc, out_md, only, quick)
        raise
    _write(doc, out_md, only, quick)
    if failures:
        from testbed.exceptions import MqbedError

        raise MqbedError("accuracy suite: " + "; ".join(failures))
    return out_md


def _write(doc: dict[str, Any], out_md: Path, only: list[str] | None, quick: bool) -> None:
    old_json = out_md.with_suffix(".json")
    if only and old_json.is_file():  # a partial re-run replaces its cases, keeps the others
        old = json.loads(old_json.read_text(encoding="utf-8"))
        if bool(old.get("quick")) == quick:
            fresh = {c["case"]: c for c in doc["cases"]}
            merged = [fresh.pop(c["case"], c) for c in old.get("cases", [])]
            # the header names the newest command; each case keeps the command that ran it
            cases = merged + list(fresh.values())
            # interrupted or not is this run's state, never an earlier run's
            doc = {**old, **doc, "cases": cases, "interrupted": bool(doc.get("interrupted"))}
    doc["pairs"] = pair_checks(doc["cases"])  # over the merged cases: a pair may span re-runs
    doc["totals"] = totals(doc["cases"], doc["pairs"])
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.with_suffix(".json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    notes = kept_notes(out_md.read_text(encoding="utf-8")) if out_md.is_file() else ""
    out_md.write_text(markdown(doc, [c.name for c in all_cases()], notes), encoding="utf-8")
