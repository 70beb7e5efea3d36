"""Run replications, in parallel processes when it pays (spawn-safe).

Each replication is a separate ``Model`` with its own random streams (replication number in the
seed's spawn key, see ``emulator.sim.kernel``). Several replications run in a
``ProcessPoolExecutor`` with the *spawn* start method — safe with threads in the parent and on
every platform — so the worker entry point is this module's top-level ``run_replication``. A
single replication, or ``processes=1``, runs in the calling process (no start-up cost).
"""

from __future__ import annotations

__all__ = ["run_replication", "run_replications", "concat_tables"]

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa

from emulator.sim.model import Model, SimResult
from testbed.core.profile import Profile
from testbed.core.records import SCHEMAS
from testbed.core.scenario import Scenario


def run_replication(scenario: Scenario, profile: Profile, replication: int) -> SimResult:
    """Build and run one replication (the worker entry point)."""
    return Model(scenario, profile, replication).run()


def run_replications(
    scenario: Scenario,
    profile: Profile,
    replications: int,
    processes: int | None = None,
    progress: Callable[[SimResult], None] | None = None,
) -> list[SimResult]:
    """Replications ``0..replications-1``, ordered by replication number."""
    if replications < 1:
        raise ValueError(f"replications must be ≥ 1, got {replications!r}")
    if processes is None:
        processes = min(replications, os.cpu_count() or 1)
    processes = max(1, min(processes, replications))
    results: list[SimResult] = []
    if processes == 1:
        for r in range(replications):
            res = run_replication(scenario, profile, r)
            if progress:
                progress(res)
            results.append(res)
        return results
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as pool:
        futures = [pool.submit(run_replication, scenario, profile, r) for r in range(replications)]
        for f in futures:
            res = f.result()
            if progress:
                progress(res)
            results.append(res)
    return results


def concat_tables(results: list[SimResult]) -> dict[str, pa.Table]:
    """All replications' tables, one table per record kind."""
    return {
        name: pa.concat_tables([r.tables[name] for r in results])
        if results
        else schema.empty_table()
        for name, schema in SCHEMAS.items()
    }
