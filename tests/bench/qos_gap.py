"""The QoS experiment's BE − PC gap (issue 17) from two run directories of any length.

    python tests/bench/qos_gap.py BE_RUN PC_RUN [--broker rabbitmq]

The accuracy suite judges the library's 60 s pair (`testbed.accuracy_checks.pair_checks`); a
60 s replication holds ~4 consumer crashes, too few to measure a gap of ~4.5 msg/s to 25 %. A
longer pair (e.g. ``mqbed run workloads/scenarios/qos-be.yaml --set duration=240s
--replications 2``, the same for qos-pc.yaml) gets the same check here: the rate of accepted
messages lost (lost + unroutable), BE − PC, paired by replication, measured and simulated,
against the closed form's. It also prints each side's per-replication counts and the consumer
crashes injected and skipped (a crash due while the consumer retries its connection through a
broker outage takes it down, live and simulated, as the closed form's independent failures
have it; one due while it restarts from an earlier crash is skipped)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from testbed.accuracy_checks import pair_checks


def _crashes(run: Path, side: str) -> tuple[int, int]:
    events = pd.read_parquet(run / side / "events.parquet")
    crash = events[events.target == "receiver"]
    started = int((crash.kind == "fault_start").sum())
    return started, int((crash.kind == "fault_skipped").sum())


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
                  f"(+{skipped} skipped)")  # fmt: skip
    for check in pair_checks(cases):
        print(f"{check['check']}: {check['value']} {check['note']} -> ok {check['ok']}")


if __name__ == "__main__":
    main()
