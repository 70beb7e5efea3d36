"""The simulated QoS BE − PC gap over long runs against the closed form (issue 17), no broker.

    python tests/bench/qos_sim_gap.py [--seconds 3600] [--seeds 606 7 8]

Runs the library's qos-be and qos-pc scenarios in the simulator for ``--seconds`` of simulated
time per seed and prints each seed's gap of loss rates (sent − delivered − dead-lettered per
second, BE − PC) beside the closed form's (`analytic.loss_breakdown`). The unit test
`test_the_simulated_be_minus_pc_gap_is_the_closed_forms` asserts the mean within 25 %; this
prints the figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.analytic.performability import loss_breakdown
from emulator.sim.model import Model
from testbed.analysis.qos import closed_form_inputs
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario

LIBRARY = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3600.0, help="simulated time per run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[606, 7, 8])
    args = ap.parse_args()
    gaps, closed = [], {}
    for seed in args.seeds:
        rates = {}
        for level in ("be", "pc"):
            text = (LIBRARY / f"qos-{level}.yaml").read_text()
            text = text.replace("duration: 60s", f"duration: {args.seconds:g}s")
            s, issues = parse_scenario(text.replace("seed: 606", f"seed: {seed}"))
            assert s is not None, [str(i) for i in issues]
            led = Model(s, Profile.zero(s.broker.kind), 0).run().ledger
            rates[level] = (led.sent - led.delivered_unique - led.dead_lettered) / args.seconds
            i = closed_form_inputs(s)
            assert i is not None
            terms = {k: i[k] for k in ("lam", "mu", "k", "a_s", "a_m", "a_c")}
            closed[level] = loss_breakdown(
                i["qos"], **terms, gamma_eq_m=i["gamma_eq_m"], gamma_eq_c=i["gamma_eq_c"],
                tau_eq_c=i["tau_eq_c"],
            ).total  # fmt: skip
        gaps.append(rates["be"] - rates["pc"])
        print(f"seed {seed}: BE − PC gap {gaps[-1]:.2f} msg/s")
    gap = closed["be"] - closed["pc"]
    mean = sum(gaps) / len(gaps)
    print(f"mean {mean:.2f} msg/s, closed form {gap:.2f} msg/s ({(mean - gap) / gap:+.1%})")


if __name__ == "__main__":
    main()
