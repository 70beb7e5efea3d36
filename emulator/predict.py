"""A prediction from the scenario and a calibration profile only (docs/architecture.md principle 5).

    from emulator.predict import predict
    result = predict(scenario, Path("runs/x"), replications=5)
    result.summary["metrics"]          # per-metric medians (+ mean, 95 % CI) across replications

``method="simulate"`` runs the SimPy model (``emulator.sim``) for each replication — in parallel
processes when there are several — and writes into ``<out_dir>/predicted/``:

- ``messages.parquet``, ``deliveries.parquet``, ``timeseries.parquet``, ``events.parquet``: all
  replications (``replication`` column), exactly the record schemas of a live run;
- ``ledger.json``: the ledger summed over the replications and, with more than one,
  ``ledger.r<N>.json`` for every N — the same files as ``measured/``
  (`testbed.core.ledger.write_ledgers`); the across-replication mean and CI are in
  ``summary.json``'s ``ledger`` section;
- ``summary.json``: per metric the median across replications — the figure the report judges —
  with the mean and its 95 % interval (see ``emulator.sim.summary``);
- ``profile.yaml``: the calibration profile exactly as predicted with (both methods). A cached
  profile is measured again over time (``mqbed run --calibration fresh``), so the run keeps its
  own copy: ``mqbed predict scenario.yaml --profile predicted/profile.yaml`` predicts it again.

``method="analytic"`` answers from the closed forms (``emulator.closed_form``) when the scenario
meets their assumptions, and otherwise raises ``PredictionError`` naming the assumption that
fails. It writes only ``summary.json`` (point values, no intervals, ``method: analytic``): the
closed forms give steady-state means, not records (and ``profile.yaml``).

A prediction reads the scenario and the profile only; it never opens measured data.
"""

from __future__ import annotations

__all__ = ["PredictionError", "PredictionResult", "predict", "METHODS"]

import json
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from emulator.closed_form import analytic_figures
from emulator.errors import PredictionError
from emulator.sim.runner import ReplicationResult, run_replications
from emulator.sim.spool import merge_parts
from emulator.sim.summary import summarize
from testbed.core.atomic import atomic_write_text
from testbed.core.availability import restart_seconds
from testbed.core.client_path import BUSY_GENERATOR
from testbed.core.ledger import write_ledgers
from testbed.core.load import offered_load
from testbed.core.profile import Profile, default_profile, load_profile
from testbed.core.records import Ledger, write_table
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario

METHODS = ("simulate", "analytic")


@dataclass(frozen=True)
class PredictionResult:
    """What ``predict`` wrote and its headline figures."""

    out_dir: Path
    """``<out_dir>/predicted``."""
    method: str
    replications: int
    summary: dict[str, Any]
    ledgers: list[Ledger] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    messages: int = 0
    wall_s: float = 0.0

    def metric(self, name: str, queue: str | None = None, flow: str | None = None) -> Any:
        """The summary entry for (metric, queue, flow), or None."""
        for m in self.summary["metrics"]:
            if m["metric"] == name and m["queue"] == queue and m["flow"] == flow:
                return m
        return None

    def __str__(self) -> str:
        tp = self.metric("throughput_msg_s")
        lat = self.metric("latency_p50_s")

        def fmt(m: Any, scale: float, unit: str) -> str:
            if not m or m["predicted"] is None:
                return "n/a"
            ci = m.get("predicted_ci")
            span = f" [{ci[0] * scale:.4g}, {ci[1] * scale:.4g}]" if ci else ""
            return f"{m['predicted'] * scale:.4g}{span} {unit}"

        return (
            f"predicted {self.summary.get('scenario', '')} ({self.method}, "
            f"{self.replications} replication(s)) -> {self.out_dir}: "
            f"throughput {fmt(tp, 1, 'msg/s')}, latency p50 {fmt(lat, 1e3, 'ms')}"
        )


def _client_path_info(prof: Profile) -> dict[str, Any] | None:
    """Where and when the profile's client path was measured (None: the profile has none)."""
    cp = prof.client_path
    if cp is None:
        return None
    p = cp.provenance
    return {
        "client": cp.client,
        "host": p.host,
        "hostname": p.hostname,
        "date": p.date,
        "broker_version": p.broker_version,
    }


def _resolve(scenario: Scenario | str | Path, profile: Profile | str | Path | None) -> Any:
    s = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    if profile is None:
        prof = default_profile(s.broker.kind, s.broker.client)
    elif isinstance(profile, Profile):
        prof = profile
    else:
        prof = load_profile(profile)
    return s, prof


def _profile_header(
    s: Scenario, prof: Profile, profile_info: dict[str, Any] | None
) -> dict[str, Any]:
    """What ``summary.json`` says about the profile a prediction used."""
    return {
        "source": prof.source,
        "host": prof.host,
        "broker": prof.broker.model_dump(),
        "date": prof.date,
        "client_path": _client_path_info(prof),
        # the broker restart after a kill the prediction used (the closed-form QoS inputs of
        # the report use the same figure): measured on the machine, or the per-kind constant
        "restart_s": restart_seconds(s.broker.kind, prof),
        "restart_measured": prof.restart_time is not None,
        **(profile_info or {}),
    }


def predict(
    scenario: Scenario | str | Path,
    out_dir: Path | str,
    *,
    method: str = "simulate",
    profile: Profile | str | Path | None = None,
    replications: int | None = None,
    processes: int | None = None,
    progress: Callable[[str], None] | None = None,
    profile_info: dict[str, Any] | None = None,
) -> PredictionResult:
    """Predict ``scenario`` into ``<out_dir>/predicted/`` (see the module docstring).

    ``profile`` defaults to the shipped profile of the broker and client library
    (``deploy/calibration/<kind>[-<client>]-local.yaml``); ``profile_info`` (where the profile
    came from: path, origin, measured on/at) is written into the summary; ``replications`` to
    the scenario's; ``processes`` to 1 for small work (< 300k simulated messages in all) and
    min(replications, CPUs) otherwise. ``progress`` receives one line per finished replication,
    and, every few seconds of a long one, how far it has simulated.
    """
    if method not in METHODS:
        raise PredictionError(f"unknown prediction method {method!r}; expected one of {METHODS}")
    s, prof = _resolve(scenario, profile)
    n = replications if replications is not None else s.replications
    if n < 1:
        raise PredictionError(f"replications must be ≥ 1, got {n}")
    out = Path(out_dir) / "predicted"
    header = {
        "scenario": s.name,
        "method": method,
        "seed": s.seed,
        "profile": _profile_header(s, prof, profile_info),
    }
    t0 = time.perf_counter()
    if method == "analytic":
        return _predict_analytic(s, prof, out, header, t0)
    return _simulate(s, prof, n, out, header, t0, processes=processes, progress=progress)


def _predict_analytic(
    s: Scenario, prof: Profile, out: Path, header: dict[str, Any], t0: float
) -> PredictionResult:
    """The closed forms' steady-state means as ``summary.json``, the only file written."""
    figures = analytic_figures(s, prof)  # refuses before anything is written
    out.mkdir(parents=True, exist_ok=True)
    _write_profile(out, prof)
    body = summarize([figures])
    summary = {
        **header,
        "replications": 1,
        "window": {"start": float(s.warmup), "end": float(s.duration)},
        **body,
        "wall_s": time.perf_counter() - t0,
    }
    path = _write_json(out / "summary.json", summary)
    return PredictionResult(
        out, "analytic", 1, summary, files={"summary": path}, wall_s=summary["wall_s"]
    )


def _simulate(
    s: Scenario,
    prof: Profile,
    n: int,
    out: Path,
    header: dict[str, Any],
    t0: float,
    *,
    processes: int | None,
    progress: Callable[[str], None] | None,
) -> PredictionResult:
    """Run `n` replications of the SimPy model and write their records, ledgers and summary."""
    out.mkdir(parents=True, exist_ok=True)
    _write_profile(out, prof)
    spool = out / ".stream"  # the replications' part files, merged below
    shutil.rmtree(spool, ignore_errors=True)
    results = _run(s, prof, n, spool, processes, progress)
    files = _write_records(out, results)
    shutil.rmtree(spool, ignore_errors=True)
    ledgers = [r.ledger for r in results]
    files["ledger"] = write_ledgers(out, ledgers)
    per_rep = [r.figures for r in results]
    start = float(s.warmup)
    summary = {
        **header,
        "replications": n,
        "window": {"start": start, "end": float(s.duration)},
        **summarize(per_rep, ledgers),
        "messages": sum(r.messages for r in results),
        "wall_s": time.perf_counter() - t0,
    }
    generators = _generators(prof, results, progress)
    if generators is not None:
        summary["load_generators"] = generators
    files["summary"] = _write_json(out / "summary.json", summary)
    return PredictionResult(
        out,
        "simulate",
        n,
        summary,
        ledgers=ledgers,
        files=files,
        messages=summary["messages"],
        wall_s=summary["wall_s"],
    )


def _run(
    s: Scenario,
    prof: Profile,
    n: int,
    spool: Path,
    processes: int | None,
    progress: Callable[[str], None] | None,
) -> list[ReplicationResult]:
    """The replications, their part files spooled under `spool`; a dead worker process
    becomes a `PredictionError` that says how to avoid it."""

    def report(res: ReplicationResult) -> None:
        if progress:
            progress(
                f"replication {res.replication}: {res.messages} messages, "
                f"{res.wall_s:.1f}s wall ({res.messages / max(res.wall_s, 1e-9):,.0f} msg/s)"
            )

    try:
        return run_replications(
            s, prof, n, spool, _processes(s, n, processes), report, say=progress
        )
    except BrokenProcessPool as e:
        raise PredictionError(
            "a replication worker process died; a script that calls predict() with several "
            "processes must guard its entry point with `if __name__ == '__main__':` (workers "
            "are spawned), or pass processes=1"
        ) from e


def _generators(
    prof: Profile, results: list[ReplicationResult], progress: Callable[[str], None] | None
) -> dict[str, Any] | None:
    """Each simulated Locust process's busiest share of a core over the replications, with a
    warning for one above ``BUSY_GENERATOR`` (the run would measure its own load generator)."""
    if not results or not results[0].generators:  # no CPU cost per operation: no processes
        return None
    cp = prof.client_path
    assert cp is not None  # simulated processes exist only with a client path's cost
    busiest = [max(r.generators[i] for r in results) for i in range(len(results[0].generators))]
    for i, u in enumerate(busiest):
        if u > BUSY_GENERATOR and progress is not None:
            progress(
                f"warning: Locust process {i} is predicted busy {u:.0%} of a core: the load "
                "generator would be the bottleneck it measures; raise `workers`"
            )
    return {"cpu_per_op": cp.cpu_per_op, "utilisation": [round(u, 3) for u in busiest]}


def _write_records(out: Path, results: list[ReplicationResult]) -> dict[str, Path]:
    """All replications' records as one Parquet file per record kind: the large ones merged
    from the spooled parts, the small ones concatenated in memory."""
    files = {
        name: merge_parts([r.parts[name] for r in results], out / f"{name}.parquet", name)
        for name in ("messages", "deliveries")
    }
    for name in ("timeseries", "events"):
        files[name] = write_table(out, name, pa.concat_tables([r.small[name] for r in results]))
    return files


def _processes(s: Scenario, n: int, processes: int | None) -> int:
    """Worker processes: as asked, else one when the work is small (a spawned worker costs
    1–2 s to start, the time to simulate ~100k messages), else min(replications, CPUs)."""
    if processes is not None:
        return max(1, processes)
    per_replication = sum(q.arrival_rate for q in offered_load(s).values()) * float(s.duration)
    if per_replication * n < 300_000:
        return 1
    return max(1, min(n, os.cpu_count() or 1))


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    """Written atomically and fsynced: an interrupted prediction leaves the old file or the
    whole new one, never a torn one."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")
    return path


def _write_profile(out: Path, prof: Profile) -> Path:
    """The profile of this prediction, loadable by ``load_profile`` (``--profile``)."""
    text = yaml.safe_dump(prof.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    path = out / "profile.yaml"
    atomic_write_text(path, "# The calibration profile this prediction used.\n" + text)
    return path
