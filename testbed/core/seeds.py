"""Seeds and random streams both sides derive the same way, so that replication *r* of a
prediction replays the random choices of live replication *r* (fault episodes, client crashes).

- `replication_seed`: the seed live replication *r* runs with (the live runner, its fault proxy
  and workload processes; the simulator's fault timeline);
- `stochastic_fault_rng`: the stream of the stochastic fault at position *i* of ``faults:``
  (broker failure/repair times, planned by `testbed.core.faultplan.plan_faults`);
- `crash_rng`: the stream of instance *k* of a consumer group under stochastic fault *i*
  (its crash/restart times, planned by `testbed.core.faultplan.plan_crashes`).
"""

from __future__ import annotations

__all__ = [
    "REPLICATION_SEED_STRIDE",
    "CRASH_STREAM",
    "replication_seed",
    "stochastic_fault_rng",
    "crash_rng",
]

import numpy as np

REPLICATION_SEED_STRIDE = 7919
"""Replication *r* runs with ``scenario.seed + 7919 r`` (a prime, so nearby scenario seeds do
not give overlapping replication seeds for small *r*)."""
CRASH_STREAM = 6
"""Entropy word that keeps the client-crash streams apart from the other seeded streams."""


def replication_seed(seed: int, replication: int) -> int:
    """The seed of replication `replication` of a scenario with seed `seed`."""
    return seed + REPLICATION_SEED_STRIDE * replication


def stochastic_fault_rng(seed: int, index: int) -> np.random.Generator:
    """The rng of the stochastic fault at position `index` of the scenario's faults."""
    return np.random.default_rng([seed, index])


def crash_rng(seed: int, index: int, instance: int) -> np.random.Generator:
    """The rng of consumer instance `instance` under the stochastic fault at position `index`."""
    return np.random.default_rng(np.random.SeedSequence([seed, CRASH_STREAM, index, instance]))
