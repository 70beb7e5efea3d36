"""The simulated QoS BE − PC gap over long runs against the closed form (issue 17), no broker.

    python tests/bench/qos_sim_gap.py [--seconds 3600] [--seeds 606 7 8]

Runs the library's qos-be and qos-pc scenarios in the simulator for ``--seconds`` of simulated
time per seed and prints each seed's gap of loss rates (sent − delivered − dead-lettered per
second, BE − PC) beside the closed form's (`analytic.loss_breakdown`). The unit test
`test_the_simulated_be_minus_pc_gap_is_the_closed_forms` runs `simulated_pair` too and asserts
the mean within 25 %; this prints the figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.analytic import LossBreakdown
from emulator.sim.model import Model
from testbed.analysis.qos import closed_form_inputs, closed_form_terms
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def simulated_pair(seconds: float, seed: int) -> dict[str, tuple[float, LossBreakdown]]:
    """For qos-be and qos-pc (keys ``be``, ``pc``) over ``seconds`` of simulated time with
    ``seed``: the simulated loss rate (sent − delivered − dead-lettered per second) and the
    closed form's terms."""
    out = {}
    for level in ("be", "pc"):
        text = (LIBRARY / f"qos-{level}.yaml").read_text()
        text = text.replace("duration: 60s", f"duration: {seconds:g}s")
        s, issues = parse_scenario(text.replace("seed: 606", f"seed: {seed}"))
        assert s is not None, [str(i) for i in issues]
        led = Model(s, Profile.zero(s.broker.kind), 0).run().ledger
        inputs = closed_form_inputs(s)
        assert inputs is not None
        rate = (led.sent - led.delivered_unique - led.dead_lettered) / seconds
        out[level] = (rate, closed_form_terms(inputs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3600.0, help="simulated time per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[606, 7, 8])
    args = ap.parse_args()
    gaps = []
    for seed in args.seeds:
        pair = simulated_pair(args.seconds, seed)
        gaps.append(pair["be"][0] - pair["pc"][0])
        print(f"seed {seed}: BE − PC gap {gaps[-1]:.2f} msg/s")
    gap = pair["be"][1].total - pair["pc"][1].total
    mean = sum(gaps) / len(gaps)
    print(f"mean {mean:.2f} msg/s, closed form {gap:.2f} msg/s ({(mean - gap) / gap:+.1%})")


if __name__ == "__main__":
    main()
