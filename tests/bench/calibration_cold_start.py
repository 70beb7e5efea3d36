"""Is the client-path calibration's first phase slower because it comes first?

Runs the generated calibration scenario (`testbed.calibration.path_scenario`, scale 1) with two
copies of its first phase appended after the sparse stream: the same streams at the same rates
(``again``), and the same without the fan-out stream (``nofan``). It prints the median and p90 (ms)
of each delivery stream per window, and the first phase's and its copy's medians per 3 s slice from
when their streams start: a start that is cold shows as slices falling towards the copy's level.
Evidence for `path_scenario.PRIME` (docs/models.md §9, *A cold calibration*): on a warmed ActiveMQ
5.17.2 (2026-11-28, revision 8 timing) the small stream's slices were 1.66, 1.31, 1.11, 1.08 ms and
the copy's 1.04-1.15 ms. Needs a running broker (``mqbed up --broker KIND``); ~2 min.

    python tests/bench/calibration_cold_start.py --broker activemq --home .mqbed
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from testbed.calibration.path_scenario import END, PHASES, at, calibration_scenario

CLIENT = {"rabbitmq": "pika", "activemq": "stomp"}
SLICE = 3.0


def scenario(kind: str) -> tuple[dict, dict[str, tuple[float, float]]]:
    """The calibration scenario with the two copies, and every window's (start, stop) in s."""
    s = calibration_scenario(kind, CLIENT[kind], 1.0)
    first = PHASES[0]
    span = first.stop - first.start
    windows = {ph.name: (at(ph.start + 1, 1.0), at(ph.stop, 1.0)) for ph in PHASES}
    t = at(END, 1.0) + 2  # after every stream of the protocol
    copies = []
    for label, keep_fan in (("again", True), ("nofan", False)):
        for p in s["producers"]:
            if not p["name"].startswith(f"{first.name}-") or (
                p["name"].endswith("-fan") and not keep_fan
            ):
                continue
            q = copy.deepcopy(p)
            q.update(name=f"{label}-{p['name']}", start=f"{t}s", stop=f"{t + span}s")
            copies.append(q)
        windows[label] = (t + 1, t + span)
        t += span + 2
    s["producers"] += copies
    s.update(name="calibration-cold-start", duration=f"{t}s")
    return s, windows


def report(deliveries: pd.DataFrame, windows: dict[str, tuple[float, float]]) -> None:
    d = deliveries[(deliveries.outcome == "acked") & deliveries.latency_s.notna()].copy()
    d["t_pub"] = d.t_deliver - d.latency_s
    d["stream"] = d["queue"].astype(str).str.removeprefix("mqbed-cal-")
    rows = []
    for name, (a, b) in windows.items():
        for stream, g in d[(d.t_pub >= a) & (d.t_pub < b)].groupby("stream"):
            if len(g) >= 20:
                p50, p90 = np.quantile(g.latency_s * 1e3, [0.5, 0.9])
                rows.append((name, stream, round(p50, 3), round(p90, 3)))
    t = pd.DataFrame(rows, columns=["window", "stream", "p50", "p90"])
    for q in ("p50", "p90"):
        print(f"{q} (ms) per window\n{t.pivot(index='stream', columns='window', values=q)}\n")
    for stream in ("small", "persistent", "confirmed", "large"):
        # slices from when the streams start: the first phase's at 0 (revision 9 primes them),
        # the copy's 1 s before its window opens
        for name, origin in ((PHASES[0].name, 0.0), ("again", windows["again"][0] - 1)):
            g = d[(d.stream == stream) & (d.t_pub >= origin) & (d.t_pub < windows[name][1])]
            by = g.groupby(((g.t_pub - origin) // SLICE).astype(int)).latency_s.median() * 1e3
            print(f"{stream:<11} {name:<6} p50 per {SLICE:g} s slice: {by.round(3).tolist()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--broker", choices=sorted(CLIENT), required=True)
    ap.add_argument("--home", type=Path, required=True, help="testbed home of `mqbed up`")
    args = ap.parse_args()
    spec, windows = scenario(args.broker)
    with tempfile.TemporaryDirectory(prefix="mqbed-cold-start-") as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        mqbed = Path(sys.executable).with_name("mqbed")
        cmd = [str(mqbed), "run", str(path), "--no-predict", "--no-report", "--home",
               str(args.home), "--out", str(Path(tmp) / "runs")]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=600)
        (run_dir,) = (Path(tmp) / "runs").iterdir()
        report(pd.read_parquet(run_dir / "measured" / "deliveries.parquet"), windows)


if __name__ == "__main__":
    main()
