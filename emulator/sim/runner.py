"""Run replications, in parallel processes when it pays (spawn-safe), streaming their records.

Each replication is a separate ``Model`` with its own random streams (replication number in the
seed's spawn key, see ``emulator.sim.kernel``). Its recorder streams the messages and
deliveries to part files in ``directory`` while it runs (``emulator.sim.recorder``) and a
``FigureStream`` accumulates its summary figures from the same records, so a replication's
peak memory follows the messages in flight, not the run's length; what comes back to the
parent is small (part paths, ledger, figures, the timeseries and events tables).

Several replications run in a ``ProcessPoolExecutor`` with the *spawn* start method — safe
with threads in the parent and on every platform — so the worker entry point is this
module's top-level ``run_replication``. A single replication, or ``processes=1``, runs in the
calling process (no start-up cost).
"""

from __future__ import annotations

__all__ = ["ReplicationResult", "run_replication", "run_replications"]

import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Generator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from emulator.sim.model import Model
from emulator.sim.summary import FigureStream, Key, load_window
from testbed.core.profile import Profile
from testbed.core.records import Ledger
from testbed.core.scenario import Scenario


@dataclass
class ReplicationResult:
    """One streamed replication: where its big tables are and its figures."""

    replication: int
    parts: dict[str, Path]
    """``messages`` and ``deliveries``: this replication's Parquet part files."""
    small: dict[str, pa.Table]
    """``timeseries`` and ``events``."""
    ledger: Ledger
    figures: dict[Key, float]
    messages: int
    sim_end: float
    wall_s: float
    generators: list[float] = field(default_factory=list)
    """Share of a core each simulated Locust process was busy, over the whole run (none when
    the profile has no CPU cost per client operation)."""


PROGRESS_EVERY_S = 5.0
"""Wall seconds between two progress lines of one long replication."""


def _ticker(
    model: Model, replication: int, every_s: float, say: Callable[[str], None]
) -> Generator[Any, Any, None]:
    """Says how far a replication has simulated, at most every ``every_s`` wall seconds. It
    only reads the clock: no state, no random draw, so the results are the same without it."""
    horizon = float(model.scenario.duration)
    t0 = last = time.perf_counter()
    while not model.stop_event.triggered:
        yield model.env.timeout(max(horizon / 100.0, 0.05))
        now = time.perf_counter()
        if now - last >= every_s:
            last = now
            t = float(model.env.now)
            say(f"replication {replication}: {min(t / horizon, 1.0):.0%} simulated "
                f"({t:.0f} of {horizon:.0f} s), {now - t0:.0f} s wall")  # fmt: skip


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_replication(
    scenario: Scenario,
    profile: Profile,
    replication: int,
    directory: Path,
    say: Callable[[str], None] | None = None,
    every_s: float = PROGRESS_EVERY_S,
) -> ReplicationResult:
    """Build and run one replication, streaming into ``directory`` (the worker entry point).
    With ``say``, a long replication reports how far it has simulated (:func:`_ticker`)."""
    model = Model(scenario, profile, replication)
    if say is not None:
        model.add_process(_ticker(model, replication, every_s, say))
    t0 = time.perf_counter()
    rec = model.rec
    rec.configure(directory, replication)
    window = load_window(rec.small_tables()["events"])  # the phases are recorded at build
    figures = FigureStream(window, side=Path(directory) / f"latency.r{replication}.bin")
    rec.listeners.append(figures)
    model.env.run(until=model.stop_event)
    done = rec.finish()
    return ReplicationResult(
        replication=replication,
        parts=done.parts,
        small=done.small,
        ledger=done.ledger,
        figures=figures.figures(rec.names, rec.names, done.small["timeseries"], done.ledger),
        messages=done.messages,
        sim_end=float(model.env.now),
        wall_s=time.perf_counter() - t0,
        generators=[cpu.booked / max(float(model.env.now), 1e-9) for cpu in model.processes.cpus],
    )


def run_replications(
    scenario: Scenario,
    profile: Profile,
    replications: int,
    directory: Path,
    processes: int | None = None,
    progress: Callable[[ReplicationResult], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[ReplicationResult]:
    """Replications ``0..replications-1``, ordered by replication number. ``say`` receives the
    progress lines of long replications (worker processes write theirs to stderr)."""
    if replications < 1:
        raise ValueError(f"replications must be ≥ 1, got {replications!r}")
    if processes is None:
        processes = min(replications, os.cpu_count() or 1)
    processes = max(1, min(processes, replications))
    results: list[ReplicationResult] = []
    if processes == 1:
        for r in range(replications):
            res = run_replication(scenario, profile, r, directory, say)
            if progress:
                progress(res)
            results.append(res)
        return results
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
        futures = [
            pool.submit(
                run_replication,
                scenario,
                profile,
                r,
                directory,
                _to_stderr if say is not None else None,
            )  # fmt: skip
            for r in range(replications)
        ]
        for f in futures:
            res = f.result()
            if progress:
                progress(res)
            results.append(res)
    return results
