"""The QoS experiment's BE − PC gap (issue 17) from two run directories of any length.

    python tests/bench/qos_gap.py BE_RUN PC_RUN [--broker rabbitmq]

The accuracy suite judges the library's 60 s pair (`testbed.accuracy_checks.pair_checks`); a
60 s replication holds ~4 consumer crashes, too few to measure a gap of ~4.5 msg/s to 25 %. A
longer pair (e.g. ``mqbed run workloads/scenarios/qos-be.yaml --set duration=240s
--replications 2``, the same for qos-pc.yaml) gets the same check here: the rate of accepted
messages lost (lost + unroutable), BE − PC, paired by replication, measured and simulated,
against the closed form's. It also prints each side's per-replication counts, the consumer
crashes injected and skipped, the fractions of the run the broker was down and the consumer was
down while the broker was up (what the closed form's consumer-down term counts, at λ msg/s),
and the heal times of the kills where the side timed them (a crash due while the consumer retries its connection through a
broker outage takes it down, live and simulated, as the closed form's independent failures
have it; one due while it restarts from an earlier crash is skipped)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from testbed.accuracy_checks import pair_checks
from testbed.calibration.restart_observed import observed_heals


def _crashes(run: Path, side: str) -> tuple[int, int]:
    events = pd.read_parquet(run / side / "events.parquet")
    crash = events[events.target == "receiver"]
    started = int((crash.kind == "fault_start").sum())
    return started, int((crash.kind == "fault_skipped").sum())


def _spans(rows: pd.DataFrame, opens: set[str], closes: set[str], end: float) -> list[tuple]:
    """(start, end) intervals from time-ordered rows opened and closed by the given kinds."""
    out, since = [], None
    for t, kind in zip(rows.t, rows.kind, strict=True):
        if kind in opens and since is None:
            since = t
        elif kind in closes and since is not None:
            out.append((since, t))
            since = None
    return out + ([(since, end)] if since is not None else [])


def _outages(run: Path, side: str, span: float) -> str:
    """The broker's and the consumer's down time in a side's events: the fraction of the run
    the broker was down, the consumer down while the broker was up (what the closed form's
    consumer-down term counts), and the kills' heal times where the side timed them."""
    events = pd.read_parquet(run / side / "events.parquet").sort_values("t")
    broker_down = consumer_up_gap = 0.0
    reps = sorted(events.replication.unique())
    for rep in reps:
        ev = events[events.replication == rep]
        broker = _spans(ev[ev.target == "broker"], {"broker_down"}, {"broker_up"}, span)
        mine = ev[ev.target.astype(str).str.startswith("receiver")]
        consumer = _spans(mine, {"fault_start", "client_down"}, {"fault_end", "client_up"}, span)
        overlap = sum(max(0.0, min(e1, e2) - max(s1, s2))
                      for s1, e1 in consumer for s2, e2 in broker)  # fmt: skip
        broker_down += sum(e - s for s, e in broker)
        consumer_up_gap += sum(e - s for s, e in consumer) - overlap
    total = span * len(reps)
    heals = [h for h in observed_heals(events) if h > 0]  # the simulator's are 0: not timed
    healed = (f", kills healed in {sum(heals) / len(heals):.1f} s on average "
              f"({min(heals):.1f}-{max(heals):.1f} s, {len(heals)})" if heals else "")  # fmt: skip
    return (f"broker down {broker_down / total:.1%}, consumer down with the broker up "
            f"{consumer_up_gap / total:.1%}{healed}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("be", type=Path, help="run directory of qos-be")
    ap.add_argument("pc", type=Path, help="run directory of qos-pc")
    ap.add_argument("--broker", default="rabbitmq", help="label of the pair")
    args = ap.parse_args()
    cases = []
    for level, run in (("BE", args.be), ("PC", args.pc)):
        summary = json.loads((run / "analysis" / "summary.json").read_text())
        loss = summary["qos_loss"]
        cases.append({"case": f"QoS experiment, {level} [{args.broker}]",
                      "scenario": f"qos-{level.lower()}.yaml", "rows": [], "qos_loss": loss})  # fmt: skip
        span = loss["window"][1] - loss["window"][0]
        for row in loss["rows"][:-1]:
            side = "measured" if row["source"] == "measured" else "predicted"
            started, skipped = _crashes(run, side)
            print(f"{level} {row['source']:>9}: {span:g} s a replication, lost {row['lost']}, "
                  f"unroutable {row['unroutable']}, consumer crashes {started} "
                  f"(+{skipped} skipped); {_outages(run, side, span)}")  # fmt: skip
    for check in pair_checks(cases):
        print(f"{check['check']}: {check['value']} {check['note']} -> ok {check['ok']}")


if __name__ == "__main__":
    main()
