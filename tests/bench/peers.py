"""The same queueing models in bare SimPy, in Ciw and in mqbed's simulator (issue 18 §4).

Each ``run_<engine>(model, horizon, seed)`` simulates one replication of ``model`` — an M/M/c
station or an M/M/1 → M/M/1 tandem, Poisson arrivals from t = 0 — and returns the mean
sojourn (arrival → departure from the last station) of the customers that arrived in
``[WARMUP, horizon)`` and left, how many customers it simulated, and its wall time. In mqbed
the M/M/c station is ``c`` prefetch-1 consumers with exponential service on one queue (amqp
model, zero-cost profile) and the tandem is the threads model's receive → dispatch stages
with one thread each; ``agree`` checks that the engines' 95 % intervals overlap.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

WARMUP = 20.0


@dataclass(frozen=True)
class QueueModel:
    name: str
    lam: float
    mus: tuple[float, ...]  # one service rate per station
    servers: int = 1  # servers of an M/M/c station (tandem stations have one)

    @property
    def tandem(self) -> bool:
        return len(self.mus) > 1


@dataclass(frozen=True)
class Run:
    sojourn: float
    customers: int
    wall_s: float


def _window_mean(arrive: np.ndarray, leave: np.ndarray, horizon: float) -> float:
    ok = (arrive >= WARMUP) & (arrive < horizon) & np.isfinite(leave)
    return float((leave[ok] - arrive[ok]).mean())


def run_simpy(m: QueueModel, horizon: float, seed: int) -> Run:
    """Bare SimPy: one process per customer, one ``Resource`` per station."""
    import simpy

    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    stations = [simpy.Resource(env, capacity=m.servers if not m.tandem else 1) for _ in m.mus]
    arrive: list[float] = []
    leave: list[float] = []

    def customer(i: int) -> Generator[Any, Any, None]:
        for res, mu in zip(stations, m.mus, strict=True):
            with res.request() as req:
                yield req
                yield env.timeout(rng.exponential(1 / mu))
        leave[i] = env.now

    def source() -> Generator[Any, Any, None]:
        while True:
            yield env.timeout(rng.exponential(1 / m.lam))
            arrive.append(env.now)
            leave.append(math.inf)
            env.process(customer(len(arrive) - 1))

    env.process(source())
    t0 = time.perf_counter()
    env.run(until=horizon + 30)
    wall = time.perf_counter() - t0
    return Run(_window_mean(np.array(arrive), np.array(leave), horizon), len(arrive), wall)


def run_ciw(m: QueueModel, horizon: float, seed: int) -> Run:
    import ciw

    k = len(m.mus)
    routing = [[1.0 if j == i + 1 else 0.0 for j in range(k)] for i in range(k)]
    net = ciw.create_network(
        arrival_distributions=[ciw.dists.Exponential(rate=m.lam)] + [None] * (k - 1),
        service_distributions=[ciw.dists.Exponential(rate=mu) for mu in m.mus],
        routing=routing,
        number_of_servers=[m.servers if not m.tandem else 1] * k,
    )
    ciw.seed(seed)
    sim = ciw.Simulation(net)
    t0 = time.perf_counter()
    sim.simulate_until_max_time(horizon + 30)
    wall = time.perf_counter() - t0
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for rec in sim.get_all_records():
        first[rec.id_number] = min(first.get(rec.id_number, math.inf), rec.arrival_date)
        if rec.node == k:
            last[rec.id_number] = rec.exit_date
    ids = sorted(first)
    arrive = np.array([first[i] for i in ids])
    leave = np.array([last.get(i, math.inf) for i in ids])
    return Run(_window_mean(arrive, leave, horizon), len(ids), wall)


def _mqbed_scenario(m: QueueModel, horizon: float, seed: int) -> Any:
    from testbed.core.scenario_loader import parse_scenario

    if m.tandem:
        broker = "{model: threads, threads: 1}"
        consumers = "{name: c, queue: q, count: 1, prefetch: 0}"
    else:
        broker = "{model: amqp}"
        consumers = (
            f"{{name: c, queue: q, count: {m.servers}, prefetch: 1, "
            f"service_time: {{kind: exponential, mean: {1 / m.mus[0]}s}}}}"
        )
    text = f"""
name: peers-{"tandem" if m.tandem else "mmc"}
seed: {seed}
duration: {horizon}s
warmup: {WARMUP}s
drain_timeout: 30s
broker: {broker}
topology:
  queues: [{{name: q}}]
producers:
  - {{name: p, queue: q, arrival: {{kind: poisson, rate: {m.lam}}}}}
consumers:
  - {consumers}
"""
    s, issues = parse_scenario(text)
    assert s is not None, [str(i) for i in issues]
    return s


def run_mqbed(m: QueueModel, horizon: float, seed: int) -> Run:
    """mqbed's simulator, recording every message (``Model.run``: tables included)."""
    from emulator.sim.model import Model
    from testbed.core.profile import Profile

    if m.tandem:
        svc = {"receive": {"mean": 1 / m.mus[0], "sd": 1 / m.mus[0]}}
        svc["dispatch"] = {"mean": 1 / m.mus[1], "sd": 1 / m.mus[1]}
        prof = Profile.zero(kind="activemq", threads=svc)
    else:
        prof = Profile.zero()
    res = Model(_mqbed_scenario(m, horizon, seed), prof, 0).run()
    msgs, dels = res.tables["messages"], res.tables["deliveries"]
    pub = msgs["t_publish"].to_numpy()
    acked = dels.filter(dels["outcome"].to_numpy(zero_copy_only=False) == "acked")
    idx = np.array(acked["msg_id"].to_pylist(), dtype=np.int64)
    end = acked["t_deliver" if m.tandem else "t_done"].to_numpy()
    leave = np.full(len(pub), math.inf)
    leave[idx] = end
    return Run(_window_mean(pub, leave, horizon), len(pub), res.wall_s)


ENGINES: dict[str, Callable[[QueueModel, float, int], Run]] = {
    "simpy": run_simpy,
    "ciw": run_ciw,
    "mqbed": run_mqbed,
}


def ci95(x: list[float]) -> tuple[float, float, float]:
    a = np.asarray(x)
    half = float(stats.t.ppf(0.975, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return float(a.mean()), float(a.mean()) - half, float(a.mean()) + half


def compare(m: QueueModel, horizon: float, reps: int) -> dict[str, dict[str, Any]]:
    """Every engine, ``reps`` replications each: sojourns, CI, customers/s of wall time."""
    out: dict[str, dict[str, Any]] = {}
    for name, run in ENGINES.items():
        runs = [run(m, horizon, 1000 + r) for r in range(reps)]
        mean, lo, hi = ci95([r.sojourn for r in runs])
        rate = sum(r.customers for r in runs) / sum(r.wall_s for r in runs)
        out[name] = {"mean": mean, "ci": (lo, hi), "msg_s": rate}
    return out


def agree(result: dict[str, dict[str, Any]]) -> bool:
    """Every pair of engines' 95 % intervals of the mean sojourn overlap."""
    cis = [r["ci"] for r in result.values()]
    return all(a[0] <= b[1] and b[0] <= a[1] for a in cis for b in cis)
