"""The event kernel: SimPy's ``Environment`` plus cheap callback events and seeded streams.

Producers, queues and consumers schedule plain callbacks (``Kernel.call``) instead of running
one generator process per message: a callback event costs about a quarter of a SimPy ``Timeout``
+ process resume (measured: `_Call`), and the hot path schedules 3–5 of them per message.
Anything that is naturally a process — the timeseries sampler and the autoscaling controllers
(docs/models.md §7–§8) — runs as an ordinary SimPy process on the same ``env`` and clock
(``Kernel.process``); the fault timeline (§6) schedules callbacks like the hot path.

Randomness (reproducible predictions, issue "Emulator"): every component draws from its own
``numpy.random.Generator``, derived from the scenario seed, the replication number and the
component's *name* — ``SeedSequence(seed, spawn_key=(replication, crc32(name)))``, i.e. the
child of ``SeedSequence(seed).spawn(n)[replication]`` keyed by the name. Adding a producer or a
consumer therefore never shifts the draws of the others, and the same seed reproduces the same
tables bit for bit. The one exception are the producers' send schedules, drawn from
``testbed.core.seeds.arrival_rng`` as the live producers draw theirs (same intended times).
"""

from __future__ import annotations

__all__ = ["Kernel", "stream", "uniforms", "batch_for"]

import zlib
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL


class _Call:
    """A pre-triggered event whose single callback receives it (value in ``.value``).

    It carries only what ``Environment.step`` reads (``callbacks``, ``_ok``), so it is cheap to
    make; nothing may ``yield`` it. ``_ok`` is SimPy's private attribute: SimPy is pinned
    (constraints.txt) and ``tests/unit/test_sim_kernel.py`` fails when ``step`` reads anything
    else or orders callbacks otherwise. Why: measured 2026-12-01 (SimPy 4.1.2, a busy 2-core
    machine, best of 7), scheduling and running one callback costs 4.09 us this way and 4.29 us
    as a public ``env.timeout(delay, value).callbacks.append(fn)``, about 5 % of the kernel's
    cost; a whole prediction (qos-pc at 10 times the rate and duration) took 3.87 s of CPU this
    way, 3.94 s with public timeouts (best of 3) — about 2 %, near the noise. A generator
    process per callback (a Timeout plus a resume) costs 14.1 us against 3.7 us.
    """

    __slots__ = ("callbacks", "_ok", "value")

    def __init__(self, fn: Callable[[Any], None], value: Any) -> None:
        self.callbacks = [fn]
        self._ok = True
        self.value = value


class Kernel:
    """One SimPy environment and the fast ``call`` primitive the model is built on."""

    def __init__(self, env: simpy.Environment | None = None) -> None:
        self.env = env if env is not None else simpy.Environment()
        self._schedule = self.env.schedule

    @property
    def now(self) -> float:
        return float(self.env.now)

    def call(self, delay: float, fn: Callable[[Any], None], value: Any = None) -> None:
        """Run ``fn(event)`` after ``delay`` seconds (``event.value`` is ``value``)."""
        self._schedule(_Call(fn, value), NORMAL, delay)  # type: ignore[arg-type]

    def call_at(self, t: float, fn: Callable[[Any], None], value: Any = None) -> None:
        """Run ``fn(event)`` at time ``t`` (not before now)."""
        now = self.env.now
        self._schedule(_Call(fn, value), NORMAL, t - now if t > now else 0.0)  # type: ignore[arg-type]

    def process(self, gen: Generator[Any, Any, Any]) -> simpy.Process:
        """Start a SimPy process (controllers, fault injectors, samplers)."""
        return self.env.process(gen)


def stream(seed: int, replication: int, name: str) -> np.random.Generator:
    """The random stream of component ``name`` in ``replication`` (see module docstring)."""
    key = zlib.crc32(name.encode("utf-8"))
    seq = np.random.SeedSequence(seed, spawn_key=(replication, key))
    return np.random.Generator(np.random.PCG64(seq))


def uniforms(rng: np.random.Generator, batch: int = 4096) -> Callable[[], float]:
    """A fast zero-argument sampler of U[0, 1) draws."""

    def gen() -> Iterator[float]:
        while True:
            yield from rng.random(batch).tolist()

    return gen().__next__


def batch_for(expected: float) -> int:
    """Numpy batch size for a sampler expected to be called about ``expected`` times.

    Small components (thousands of producer instances) get small batches, so memory stays
    proportional to the work, not to the number of components.
    """
    if not expected > 0:
        return 16
    return int(min(4096, max(16, 1.2 * expected + 16)))
