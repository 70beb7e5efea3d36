"""A long simulated replication says how far it has got, without changing its results."""

from __future__ import annotations

from pathlib import Path

import yaml

from emulator.sim.runner import run_replication
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_progress_lines_rise_and_the_figures_stay_the_same(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "workloads/scenarios/quickstart.yaml").read_text())
    data.update(duration="6s", warmup="1s")
    f = tmp_path / "qs.yaml"
    f.write_text(yaml.safe_dump(data))
    s = load_scenario(f)
    profile = default_profile("rabbitmq", "pika")
    lines: list[str] = []
    told = run_replication(s, profile, 0, tmp_path / "a", lines.append, every_s=0.0)
    quiet = run_replication(s, profile, 0, tmp_path / "b")
    assert told.figures == quiet.figures and told.ledger == quiet.ledger  # same seed, same run
    shares = [int(line.split(": ")[1].split("%")[0]) for line in lines]
    assert len(shares) >= 50 and shares == sorted(shares) and shares[-1] == 100, lines[-3:]
    assert lines[0].startswith("replication 0: ") and "of 6 s" in lines[0]
