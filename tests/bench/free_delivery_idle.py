"""Where does a prediction's latency body come from? Deliveries to a free consumer, by idle time.

For each run directory (a live run predicted with ``--predict``), the first deliveries whose
consumer had finished its previous message before this one was published (it was free: no
wait in the client's buffer), binned by how long that consumer had been idle, measured and
predicted: median latency (ms) and count per bin. With ``--profile`` it also prints the
profile's delivery tables at the run's total rate and first message size: the plain point of
the producer's kind (what the simulator draws for a free delivery) and the follow-up point
(messages sent from a handler, onto an awake process), median and 1-90 % quantiles.

Evidence for docs/accuracy.md (2026-12-02, the two quickstart runs of that day's accuracy gate,
each predicted with the calibration taken on the spot): by the time since the latest publish or
handler end, free deliveries measured 0.86, 0.90, 1.03, 1.25 and 1.45 ms median on RabbitMQ
(0-2, 2-5, 5-10, 10-20, 20-50 ms), predicted 1.32, 1.34, 1.37, 1.39 and 1.56 ms; the profile's
confirmed-transient table at 198 msg/s had a median of 1.42 ms and its follow-up table 0.86 ms.

    python tests/bench/free_delivery_idle.py RUN_DIR [RUN_DIR ...] [--profile FILE]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

BINS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, float("inf"))
QUANTILES = (0.01, 0.1, 0.5, 0.9)
CLOCKS = {
    "idle": "the consumer's idle time",
    "process_idle": "time since the latest publish or handler end of the replication",
    "group_gap": "time since the producer group's previous publish",
}
"""The clocks a free delivery is binned by. ``process_idle`` takes every user of a replication
as one process (the simulator's wake-up clock, `emulator/sim/wake.py`): right for a run with one
Locust worker, such as the quickstart."""


def _process_idle(d: pd.DataFrame, m: pd.DataFrame) -> np.ndarray:
    out = np.full(len(d), np.nan)
    for rep in d.replication.unique():
        rows = np.flatnonzero((d.replication == rep).to_numpy())
        events = np.sort(np.concatenate([m[m.replication == rep].t_publish.to_numpy(),
                                         d.t_done.to_numpy()[rows]]))  # fmt: skip
        t = d.t_publish.to_numpy()[rows]
        i = np.searchsorted(events, t, side="left") - 1
        out[rows] = np.where(i >= 0, t - events[np.clip(i, 0, None)], np.nan)
    return out


def free_deliveries(side: Path) -> pd.DataFrame:
    """First deliveries of one side (``measured`` or ``predicted``) whose consumer was free
    when the message was published, with the clocks of `CLOCKS` (s)."""
    d = pd.read_parquet(side / "deliveries.parquet")
    cols = ["msg_id", "replication", "t_publish", "producer"]
    m = pd.read_parquet(side / "messages.parquet", columns=cols)
    # the live side names a producer by its group, the simulated one by user ("orders-0")
    m = m.assign(group=m.producer.str.replace(r"-\d+$", "", regex=True))
    m = m.sort_values(["replication", "t_publish"])
    m["group_gap"] = m.groupby(["replication", "group"]).t_publish.diff()
    d = d[d.attempt == d.attempt.min()] if "attempt" in d else d
    d = d.merge(
        m[["msg_id", "replication", "t_publish", "group_gap"]], on=["msg_id", "replication"]
    )
    d = d.sort_values(["replication", "consumer", "t_deliver"]).reset_index(drop=True)
    previous = d.groupby(["replication", "consumer"]).t_done.shift(1)
    d = d.assign(idle=d.t_publish - previous, process_idle=_process_idle(d, m))
    return d[d.idle > 0]


def by_clock(free: pd.DataFrame, clock: str) -> str:
    """`bin: count/median ms` for every bin of `BINS` that has deliveries."""
    cut = pd.cut(free[clock], BINS, right=True)
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
            print(f"  {side}: {len(free)} free deliveries, p1/p50/p90 "
                  f"{q[0]:.2f}/{q[1]:.2f}/{q[2]:.2f} ms; count/median ms by")  # fmt: skip
            for clock, what in CLOCKS.items():
                print(f"    {what}: {by_clock(free, clock)}")
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
