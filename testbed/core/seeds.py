"""Seeds and random streams both sides derive the same way, so that replication *r* of a
prediction replays the random choices of live replication *r* (fault episodes, client crashes).

- `replication_seed`: the seed live replication *r* runs with (the live runner, its fault proxy
  and workload processes; the simulator's fault timeline);
- `stochastic_fault_rng`: the stream of the stochastic fault at position *i* of ``faults:``
  (broker failure/repair times, planned by `testbed.core.faultplan.plan_faults`);
- `crash_rng`: the stream of instance *k* of a consumer group under stochastic fault *i*
  (its crash/restart times, planned by `testbed.core.faultplan.plan_crashes`);
- `arrival_rng`: the stream of the open-loop send schedule of instance *k* of a producer group
  (`testbed.core.arrivals.schedule`). A live replication and its predicted twin thus send at
  the same intended times (common random numbers): the comparison of the two is not blurred
  by two different draws of the arrival process (a Poisson 50 msg/s producer's 60 s count
  varies by ±1.9 % from one draw to the next, against a ±5 % throughput target);
- `failure_uniform`: whether attempt *k* of a message fails in a consumer group on a queue with
  a visibility timeout, keyed by the message (its producer instance and number), so a live
  replication and its twin fail the same attempts of the same messages. On such a queue one
  failure holds a message (in order: the whole line) for the timeout, so which messages fail
  decides the run: simulated 25 s replications of visibility-in-order.yaml spread their mean
  latency by ±25 % and their median by ±81 % (one sd; tests/bench/failure_spread.py), and two
  independent draws could not be compared within ±15 %.
"""

from __future__ import annotations

__all__ = [
    "REPLICATION_SEED_STRIDE",
    "CRASH_STREAM",
    "replication_seed",
    "stochastic_fault_rng",
    "crash_rng",
    "ARRIVAL_STREAM",
    "arrival_rng",
    "FAILURE_STREAM",
    "failure_uniform",
    "keyed_failures",
    "message_key",
]

import hashlib
import zlib

import numpy as np

REPLICATION_SEED_STRIDE = 7919
"""Replication *r* runs with ``scenario.seed + 7919 r`` (a prime, so nearby scenario seeds do
not give overlapping replication seeds for small *r*)."""
CRASH_STREAM = 6
"""Entropy word that keeps the client-crash streams apart from the other seeded streams."""
ARRIVAL_STREAM = 7
"""Entropy word of the producers' send schedules."""
FAILURE_STREAM = 8
"""Entropy word of the consumers' keyed failure decisions."""


def replication_seed(seed: int, replication: int) -> int:
    """The seed of replication `replication` of a scenario with seed `seed`."""
    return seed + REPLICATION_SEED_STRIDE * replication


def stochastic_fault_rng(seed: int, index: int) -> np.random.Generator:
    """The rng of the stochastic fault at position `index` of the scenario's faults."""
    return np.random.default_rng([seed, index])


def crash_rng(seed: int, index: int, instance: int) -> np.random.Generator:
    """The rng of consumer instance `instance` under the stochastic fault at position `index`."""
    return np.random.default_rng(np.random.SeedSequence([seed, CRASH_STREAM, index, instance]))


def arrival_rng(seed: int, group: str, instance: int, worker: int = 0) -> np.random.Generator:
    """The rng of the send schedule of instance `instance` of producer group `group` in the
    replication whose seed is `seed` (`replication_seed`). Keyed by the group's name, so adding
    a group shifts no other group's schedule. `worker`: the Locust worker process the live
    instance runs in; its instances number from 0 in each worker, so only worker 0's are
    paired with the simulator's (which has one process) — the others get streams of their own."""
    key = zlib.crc32(group.encode("utf-8"))
    words = [seed, ARRIVAL_STREAM, key, instance] + ([worker] if worker else [])
    return np.random.default_rng(np.random.SeedSequence(words))


def message_key(group: str, instance: int, number: int, worker: int = 0) -> str:
    """Message `number` (from 0) of instance `instance` of producer group `group`, as both
    sides name it for keyed draws: the live message id without its run and replication prefix
    (``<group>.<worker>.<instance>.<number>``; `testbed.workload.producer`, whose instance
    name `testbed.workload.users` forms). The simulator names worker 0's, the instances
    `arrival_rng` pairs."""
    return f"{group}.{worker}.{instance}.{number}"


def keyed_failures(failure_probability: float, ack: str, has_visibility: bool) -> bool:
    """Whether a consumer group draws its failures with `failure_uniform`: it fails at all, on
    a queue with a visibility timeout, and acks (an auto-ack consumer's message is gone at
    dispatch; no attempt of it comes back)."""
    return failure_probability > 0 and has_visibility and ack != "auto"


def failure_uniform(seed: int, group: str, message: str, attempt: int) -> float:
    """The uniform in [0, 1) that decides attempt `attempt` of message `message`
    (`message_key`) in consumer group `group`, in the replication whose seed is `seed`: it
    fails when the uniform is below the group's ``failure_probability``.

    A hash, not a generator: the draw must not depend on which instance, process or moment
    takes the message, and a seeded generator per message costs ~20 µs where BLAKE2b on a
    short key costs ~1 µs. Only for attempts both sides number alike (queues with a
    visibility timeout, whose controller counts them): a requeued message that comes back
    with its old attempt number would fail again forever."""
    word = f"{seed}:{FAILURE_STREAM}:{group}:{message}:{attempt}".encode()
    h = hashlib.blake2b(word, digest_size=8).digest()
    return (int.from_bytes(h, "little") >> 11) * 2.0**-53
