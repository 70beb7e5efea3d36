"""Which acks does a RabbitMQ kill forget: those after its last write, or those of a window?

Runs the library's broker-kill scenario (`workloads/scenarios/faults-broker-kill-pcm.yaml`) live,
with and without its latency toxic (the fault proxy on the consumers' links), and for every kill
compares the acked messages that came back after the restart with two rules: every ack after
the last publish before the signal (`emulator.sim.ack_journal`, RabbitMQ), and every ack in the
10 ms window before it. Given run directories (``--runs``), only judges those. Evidence for
docs/models.md §6 (2026-11-28, RabbitMQ 3.10.8/pika, five runs of three kills each): the first
rule matched all 15 kills (33 acks forgotten before the signal), the window 8 of them (22 acks).
Bounded: `--rounds` × two runs of ~3.5 min each.

    python tests/bench/ack_loss_rule.py --rounds 2
    python tests/bench/ack_loss_rule.py --runs runs/s43a/runs/*-faults-broker-kill-pcm-rabbitmq
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

SCENARIO = Path(__file__).resolve().parents[2] / "workloads/scenarios/faults-broker-kill-pcm.yaml"
WINDOW_S = 0.01
"""The calibration's RabbitMQ ack-loss window (one ack a kill at 100 msg/s)."""
BEFORE_S = 0.2
"""Acks this long before the signal are looked at."""


def kills(run: Path) -> list[tuple[int, float]]:
    """(replication, signal time) of each broker kill of a run's measured side."""
    e = pd.read_parquet(run / "measured" / "events.parquet")
    out = []
    for _, k in e[e.kind == "fault_start"].iterrows():
        detail = json.loads(k.detail)
        if detail.get("kind") == "broker_kill":  # the row is written when the process is gone
            out.append((int(k.replication), float(k.t) - float(detail.get("teardown_s") or 0.0)))
    return out


def judge(run: Path) -> list[tuple[int, int, int]]:
    """Per kill: acks forgotten before the signal, how many of them each rule names, and
    whether each rule names exactly them."""
    d = pd.read_parquet(run / "measured" / "deliveries.parquet")
    m = pd.read_parquet(run / "measured" / "messages.parquet")
    rows = []
    for rep, signal in kills(run):
        dr = d[d.replication == rep]
        copies = dr.msg_id.value_counts()
        last = m[(m.replication == rep) & (m.t_publish < signal)].t_publish.max()
        before = dr.t_done.between(signal - BEFORE_S, signal, inclusive="left")
        acks = dr[(dr.outcome == "acked") & before]
        back = set(acks[acks.msg_id.map(copies) > 1].msg_id)
        after_write = set(acks[acks.t_done > last].msg_id)
        window = set(acks[acks.t_done >= signal - WINDOW_S].msg_id)
        rows.append((len(back), int(back == after_write), int(back == window)))
        print(f"{run.name} r{rep}: {len(back)} forgotten before the signal; last publish "
              f"{(signal - last) * 1e3:.1f} ms before it; after-last-write rule "
              f"{'matches' if back == after_write else 'differs'}, 10 ms window "
              f"{'matches' if back == window else f'catches {len(back & window)}'}",
              flush=True)  # fmt: skip
    return rows


def live_runs(rounds: int, tmp: Path) -> list[Path]:
    text = SCENARIO.read_text(encoding="utf-8")
    variants = {"proxied": text, "direct": "\n".join(
        line for line in text.splitlines() if "kind: latency" not in line)}  # fmt: skip
    mqbed = Path(sys.executable).with_name("mqbed")
    runs = []
    for r in range(rounds):
        for name, body in variants.items():
            f = tmp / f"kill-{name}.yaml"
            f.write_text(body, encoding="utf-8")
            out = tmp / f"runs-{r}-{name}"
            cmd = [str(mqbed), "run", str(f), "--out", str(out), "--replications", "3",
                   "--no-predict", "--no-report"]  # fmt: skip
            subprocess.run(cmd, check=True, timeout=900, stdout=subprocess.DEVNULL)
            runs.extend(sorted(out.iterdir()))
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the two runs (default 1)")
    ap.add_argument("--runs", type=Path, nargs="+", help="judge these run directories only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mqbed-ack-loss-rule-") as tmp:
        runs = args.runs or live_runs(args.rounds, Path(tmp))
        rows = [row for run in runs for row in judge(run)]
    forgotten = sum(r[0] for r in rows)
    print(
        f"{len(rows)} kills, {forgotten} acks forgotten before the signal: the after-last-write "
        f"rule matched {sum(r[1] for r in rows)}, the 10 ms window {sum(r[2] for r in rows)}"
    )


if __name__ == "__main__":
    main()
