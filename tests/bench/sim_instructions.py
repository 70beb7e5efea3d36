"""One prediction of ``workloads/scenarios/qos-pc.yaml`` at ten times its rate (500/s, service
mean 1 ms; stochastic broker kills and consumer crashes), from the source tree given, to be
counted by callgrind: instruction counts repeat whatever else the machine does, where wall
times on a shared 2-core machine moved by ±10 % between blocks of the same command.

The simulator's cost of a change (two commits' trees, e.g. from ``git worktree add``) is the
difference of two durations, which cancels the imports and the set-up::

    for d in 10s 70s; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python tests/bench/sim_instructions.py TREE $d 2>&1 | grep Collected; done

Measured 2026-12-02 for the simulator hooks (docs/architecture.md, *Simulator hooks*): the 60 s
between the two durations (~30,000 messages) took 2,239,090,534 instructions before the hooks
(0e5a70e) and 2,288,565,420 with them (f1747fa): +2.2 %.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml


def main() -> None:
    tree, duration = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.path.insert(0, str(tree))
    from emulator.predict import predict  # the tree's own, not the installed one

    s = yaml.safe_load((tree / "workloads" / "scenarios" / "qos-pc.yaml").read_text())
    s["duration"] = duration
    s["producers"][0]["arrival"]["rate"] = "500/s"
    s["consumers"][0]["service_time"]["mean"] = "1ms"
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "qos-pc-x10.yaml"
        f.write_text(yaml.safe_dump(s))
        predict(f, Path(tmp) / "out", replications=1, processes=1)


if __name__ == "__main__":
    main()
