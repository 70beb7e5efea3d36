"""How far one client-path calibration is from the next, as the predictions of the same runs.

Every run (a live run directory with ``measured/``; ``--no-predict`` is enough) is predicted
with every profile and with every pool of three of them (`testbed.calibrate.pool_profile_files`,
as ``mqbed calibrate --draws 3`` pools its draws), and the latency KS distance, medians and
means of each pair are printed, then the mean and worst KS one by one and pooled.

Evidence for docs/accuracy.md (2026-12-02): four client-path calibrations interleaved with four
quickstart runs on one quiet machine (``mqbed up --broker rabbitmq``, then four times
``mqbed calibrate --broker rabbitmq --client-path-only --profile-out cal_N.yaml`` followed by
``mqbed run workloads/scenarios/quickstart.yaml --no-predict --no-report --replications 1``):

    python tests/bench/draw_spread.py --runs RUN... --profiles cal_1.yaml ... cal_4.yaml

gave a mean KS of 0.168 (worst 0.309) one profile at a time and 0.090 (worst 0.178) with pools
of three.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.calibrate import pool_profile_files


def latencies(side: Path) -> np.ndarray:
    d = pd.read_parquet(side / "deliveries.parquet", columns=["latency_s", "outcome"])
    return np.sort(d[d.outcome == "acked"].latency_s.dropna().to_numpy())


def ks(a: np.ndarray, b: np.ndarray) -> float:
    x = np.concatenate([a, b])
    fa = np.searchsorted(a, x, "right") / len(a)
    fb = np.searchsorted(b, x, "right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def predicted(run: Path, profile: Path, work: Path) -> np.ndarray:
    """``run`` predicted with ``profile`` (three replications) in a copy under ``work``."""
    out = work / f"{run.name}-{profile.stem}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(run / "measured", out / "measured")
    mqbed = Path(sys.executable).with_name("mqbed")
    cmd = [str(mqbed), "predict", str(run / "scenario.yaml"), "--profile", str(profile)]
    cmd += ["--run-dir", str(out), "--replications", "3"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return latencies(out / "predicted")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", type=Path, required=True)
    ap.add_argument("--profiles", nargs="+", type=Path, required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqbed-draws-") as tmp:
        work = Path(tmp)
        profiles = list(args.profiles)
        pools = []
        for combo in itertools.combinations(args.profiles, 3):
            name = "pool-" + "+".join(p.stem for p in combo)
            pools.append(pool_profile_files(list(combo), work / f"{name}.yaml"))
        single: list[float] = []
        pooled: list[float] = []
        print("run                      profile                    KS     p50 m/p ms   mean m/p ms")
        for run in args.runs:
            m = latencies(run / "measured")
            for prof in profiles + pools:
                p = predicted(run, prof, work)
                d = ks(m, p)
                (pooled if prof in pools else single).append(d)
                print(f"{run.name[:24]:<24} {prof.stem[:26]:<26} {d:.3f}  "
                      f"{np.median(m) * 1e3:.2f}/{np.median(p) * 1e3:.2f}  "
                      f"{m.mean() * 1e3:.2f}/{p.mean() * 1e3:.2f}")  # fmt: skip
        for label, values in (("one profile", single), ("pools of three", pooled)):
            if values:
                print(f"{label}: mean KS {np.mean(values):.3f}, worst {max(values):.3f} "
                      f"({len(values)} predictions)")  # fmt: skip


if __name__ == "__main__":
    main()
