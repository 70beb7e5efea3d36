"""Where does a prediction's latency body come from? Deliveries to a free consumer, by idle time.

For each run directory (a live run predicted with ``--predict``), the first deliveries whose
consumer had finished its previous message before this one was published (it was free: no
wait in the client's buffer), binned by how long that consumer had been idle, measured and
predicted: median latency (ms) and count per bin. With ``--profile`` it also prints the
profile's delivery tables at the run's total rate and first message size: the plain point of
the producer's kind (what the simulator draws for a free delivery) and the follow-up point
(messages sent from a handler, onto an awake process), median and 1-90 % quantiles.

Evidence for docs/accuracy.md (2026-12-02, the two quickstart runs of that day's accuracy gate,
each predicted with the calibration taken on the spot): free deliveries measured 0.79, 0.83,
0.91, 1.05 and 1.39 ms median on RabbitMQ for idle times under 1 ms, 1-3, 3-10, 10-30 and over
30 ms, predicted 1.28, 1.31, 1.33, 1.42 and 1.59 ms; the profile's confirmed-transient table at
200 msg/s had a median of 1.42 ms and its follow-up table 0.88 ms.

    python tests/bench/free_delivery_idle.py RUN_DIR [RUN_DIR ...] [--profile FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

BINS = (0.0, 0.001, 0.003, 0.01, 0.03, float("inf"))
QUANTILES = (0.01, 0.1, 0.5, 0.9)


def free_deliveries(side: Path) -> pd.DataFrame:
    """First deliveries of one side (``measured`` or ``predicted``) whose consumer was free
    when the message was published, with that consumer's idle time (``idle``, s)."""
    d = pd.read_parquet(side / "deliveries.parquet")
    m = pd.read_parquet(side / "messages.parquet", columns=["msg_id", "replication", "t_publish"])
    d = d[d.attempt == d.attempt.min()] if "attempt" in d else d
    d = d.merge(m, on=["msg_id", "replication"]).sort_values(
        ["replication", "consumer", "t_deliver"]
    )
    previous = d.groupby(["replication", "consumer"]).t_done.shift(1)
    d = d.assign(idle=d.t_publish - previous)
    return d[d.idle > 0]


def by_idle(free: pd.DataFrame) -> str:
    """`bin: count/median ms` for every bin of `BINS` that has deliveries."""
    cut = pd.cut(free.idle, BINS, right=True)
    g = free.groupby(cut, observed=True).latency_s.agg(["count", "median"])
    return "  ".join(f"{i.left * 1e3:g}-{i.right * 1e3:g} ms: {int(r['count'])}/"
                     f"{r['median'] * 1e3:.2f}" for i, r in g.iterrows())  # fmt: skip


def tables(profile: Path, rate: float, size: float, persistent: bool, confirms: bool) -> None:
    """The profile's plain and follow-up delivery tables at this rate and size."""
    from testbed.core.profile import load_profile

    cp = load_profile(profile).client_path
    if cp is None:
        print(f"  {profile}: no client path")
        return
    for label, follow in (("plain", False), ("follow-up", True)):
        t = cp.delivery_table(rate, size, persistent, 0.0, confirms=confirms, follow_up=follow)
        qs = " ".join(f"{t.quantile(q) * 1e3:.2f}" for q in QUANTILES)
        print(f"  profile {label:<9} table at {rate:.0f} msg/s, {size:.0f} B: {qs} ms "
              f"(quantiles {', '.join(f'{q:g}' for q in QUANTILES)})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "runs", nargs="+", type=Path, help="run directories with measured/ and predicted/"
    )
    ap.add_argument("--profile", type=Path, help="the profile the runs were predicted with")
    args = ap.parse_args()
    for run in args.runs:
        print(run)
        for side in ("measured", "predicted"):
            free = free_deliveries(run / side)
            q = np.percentile(free.latency_s, [1, 50, 90]) * 1e3
            print(f"  {side:<9} free {len(free)}: p1/p50/p90 {q[0]:.2f}/{q[1]:.2f}/{q[2]:.2f} ms;"
                  f" by idle {by_idle(free)}")  # fmt: skip
        if args.profile is not None:
            from testbed.core.scenario_loader import load_scenario

            producer = load_scenario(run / "scenario.yaml").producers[0]
            msgs = pd.read_parquet(run / "measured" / "messages.parquet")
            per_rep = msgs.groupby("replication").t_publish.agg(["count", "min", "max"])
            rate = float((per_rep["count"] / (per_rep["max"] - per_rep["min"])).mean())
            size = float(msgs.size_bytes.median())
            tables(args.profile, rate, size, producer.persistent, producer.confirms)


if __name__ == "__main__":
    main()
