"""Synthetic run directories (vectorised numpy → pyarrow → Parquet), for tests and the bench.

``write_run(root, messages=...)`` writes ``<root>/<run_id>/`` with ``scenario.yaml``,
``environment.json`` and ``measured/`` (+ ``predicted/`` unless ``predicted=False``): Poisson
publishes at `rate` msg/s over ``duration = messages / rate`` seconds, one ``acked`` delivery
per message with lognormal latency (median ``latency_median`` s; the predicted side's is scaled
by ``predicted_latency_factor``), per-second timeseries, phase events and ledgers. Seeded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from testbed.core.records import Ledger, write_table

SCENARIO = """\
name: {name}
seed: 1
duration: {duration}s
warmup: {warmup}s
drain_timeout: 5s
replications: {replications}
broker: {{kind: rabbitmq}}
topology:
  queues: [{{name: work}}]
producers:
  - {{name: orders, count: 1, queue: work, arrival: {{kind: poisson, rate: {rate}/s}}}}
consumers:
  - {{name: workers, queue: work, count: 2, service_time: {{kind: exponential, mean: 1ms}}}}
"""


def _side(
    out: Path,
    n: int,
    rate: float,
    duration: float,
    warmup: float,
    latency_median: float,
    replications: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    per_rep = n // replications
    tables: dict[str, list[pa.Table]] = {"messages": [], "deliveries": [], "timeseries": []}
    events = {k: [] for k in ("t", "kind", "target", "detail", "replication")}
    for rep in range(replications):
        t_pub = np.sort(rng.uniform(0.0, duration, per_rep))
        latency = rng.lognormal(np.log(latency_median), 0.6, per_rep)
        t_deliver = t_pub + latency
        t_done = t_deliver + rng.exponential(0.001, per_rep)
        ids = pc.binary_join_element_wise(
            f"r{rep}-", pc.cast(pa.array(np.arange(per_rep)), pa.string()), ""
        )
        reps = pa.array(np.full(per_rep, rep, dtype=np.int32))
        queue = pa.array(np.full(per_rep, "work", dtype=object), pa.string())
        tables["messages"].append(
            pa.table(
                {
                    "msg_id": ids,
                    "flow": pa.array(np.full(per_rep, "orders", dtype=object), pa.string()),
                    "queue": queue,
                    "producer": pa.array(np.full(per_rep, "orders.0", dtype=object)),
                    "size_bytes": pa.array(np.full(per_rep, 200, dtype=np.int64)),
                    "t_intended": t_pub,
                    "t_publish": t_pub,
                    "t_confirm": t_pub + 0.0002,
                    "replication": reps,
                }
            )
        )
        tables["deliveries"].append(
            pa.table(
                {
                    "msg_id": ids,
                    "queue": queue,
                    "consumer": pa.array(
                        np.where(np.arange(per_rep) % 2, "w.0", "w.1").astype(object)
                    ),
                    "attempt": pa.array(np.ones(per_rep, dtype=np.int32)),
                    "t_deliver": t_deliver,
                    "t_done": t_done,
                    "outcome": pa.array(np.full(per_rep, "acked", dtype=object), pa.string()),
                    "redelivered": pa.array(np.zeros(per_rep, dtype=bool)),
                    "latency_s": latency,
                    "replication": reps,
                }
            )
        )
        seconds = np.arange(1.0, np.ceil(duration) + 2)
        tables["timeseries"].append(
            pa.table(
                {
                    "t": seconds,
                    "queue": pa.array(["work"] * len(seconds)),
                    "depth_ready": rng.poisson(2.0, len(seconds)).astype(np.int64),
                    "depth_unacked": rng.poisson(1.0, len(seconds)).astype(np.int64),
                    "publish_rate": np.full(len(seconds), rate),
                    "deliver_rate": np.full(len(seconds), rate),
                    "ack_rate": np.full(len(seconds), rate),
                    "consumers": np.full(len(seconds), 2, dtype=np.int32),
                    "producers_blocked": np.zeros(len(seconds), dtype=np.int32),
                    "broker_up": np.ones(len(seconds), dtype=bool),
                    "memory_bytes": np.full(len(seconds), 10**8, dtype=np.int64),
                    "replication": np.full(len(seconds), rep, dtype=np.int32),
                }
            )
        )
        for t, phase in (
            (0.0, "warmup"),
            (warmup, "load"),
            (duration, "drain"),
            (duration + 1, "end"),
        ):
            events["t"].append(t)
            events["kind"].append("phase")
            events["target"].append("run")
            events["detail"].append(json.dumps({"phase": phase}))
            events["replication"].append(rep)
        ledger = Ledger(sent=per_rep, confirmed=per_rep, delivered_unique=per_rep)
        ledger.write(out / (f"ledger.r{rep}.json" if replications > 1 else "ledger.json"))
    for name, parts in tables.items():
        write_table(out, name, pa.concat_tables(parts))
    write_table(out, "events", events)
    if replications > 1:
        Ledger(sent=n, confirmed=n, delivered_unique=n).write(out / "ledger.json")


def write_run(
    root: Path,
    *,
    messages: int = 2000,
    rate: float = 200.0,
    warmup: float = 1.0,
    latency_median: float = 0.002,
    predicted_latency_factor: float = 1.0,
    predicted: bool = True,
    replications: int = 1,
    predicted_replications: int = 3,
    name: str = "synthetic",
    seed: int = 7,
) -> Path:
    """Write a synthetic run directory; returns its path."""
    duration = max(messages / rate, warmup + 2.0)
    run_dir = Path(root) / f"20260101T000000Z-{name}"
    (run_dir / "measured").mkdir(parents=True)
    (run_dir / "scenario.yaml").write_text(
        SCENARIO.format(
            name=name, duration=duration, warmup=warmup, rate=rate, replications=replications
        )
    )
    (run_dir / "environment.json").write_text(json.dumps({"host": {"cpus": 2}, "synthetic": True}))
    _side(
        run_dir / "measured", messages, rate, duration, warmup, latency_median, replications, seed
    )
    if predicted:
        (run_dir / "predicted").mkdir()
        _side(
            run_dir / "predicted",
            messages * predicted_replications // replications,
            rate,
            duration,
            warmup,
            latency_median * predicted_latency_factor,
            predicted_replications,
            seed + 1,
        )
    return run_dir
