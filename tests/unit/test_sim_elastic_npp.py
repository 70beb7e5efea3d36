"""The elastic pool's claim in the simulator at the paper's scale (docs/models.md §7): with the
NPP-sized pool pre-provisioned, a ramp to 750 msg/s never makes a consumer wait for a host to
boot and keeps the mean queue length below 2 × maxLoad; the default scale-down pace keeps the
scale-ups of a rising ramp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from emulator.sim.model import Model
from testbed.accuracy_checks import boot_waits, mean_member_length
from testbed.core.policies.autoscaler import pool_size
from testbed.core.profile import default_profile
from testbed.core.scenario import Scenario
from testbed.core.scenario_loader import load_scenario

SCENARIO = (
    Path(__file__).resolve().parents[2] / "workloads" / "scenarios" / "elastic-ramp-750-npp.yaml"
)


def _run(s: Scenario, rep: int) -> Any:
    return Model(s, default_profile(s.broker.kind), rep).run()


def _scales(result: Any) -> list[tuple[float, dict[str, Any]]]:
    rows = result.tables["events"].to_pylist()
    return [(e["t"], json.loads(e["detail"])) for e in rows if e["kind"] == "scale"]


LIVE_SCALE = SCENARIO.with_name("elastic-ramp-500-npp.yaml")
"""The same claim scaled to what a 2-vCPU machine carries live (the accuracy suite runs it)."""


@pytest.mark.parametrize(("path", "consumers"), [(SCENARIO, 8), (LIVE_SCALE, 5)])
@pytest.mark.parametrize("rep", [0, 1, 2])
def test_npp_pool_no_boot_wait_and_bounded_queues(path: Path, consumers: int, rep: int) -> None:
    """``consumers``: what the ramp's top rate needs at 100 msg/s a consumer."""
    s = load_scenario(path)
    spec = s.autoscaling[0]
    assert spec.preprovisioned is None and pool_size(spec) == 1  # NPP = ceil(δ·5/200), δ ≤ 11.67
    r = _run(s, rep)
    scales = _scales(r)
    starts = [(t, st) for t, d in scales for st in d.get("starts", [])]
    assert len(starts) >= consumers - 1  # the first consumer is there from the start
    # the accuracy suite's elastic checks read a run's tables with the same two functions
    waits = boot_waits(r.tables["events"].to_pandas())
    assert waits == [], f"consumers waited for a host to boot: {waits}"
    assert {st["source"] for _, st in starts} <= {"pool", "slot"}
    length = mean_member_length(r.tables["timeseries"].to_pandas(), spec.alias)
    assert 0 < length < 2 * spec.max_load
    assert r.ledger.lost == 0 and r.ledger.delivered_unique == r.ledger.sent


def _tight_band(stabilization: str) -> Scenario:
    """The acceptance scenario with min_load 180: right after a scale-up the average dips
    below it while production still rises."""
    data = yaml.safe_load(SCENARIO.read_text())
    data["autoscaling"][0].update(min_load=180)
    if stabilization:
        data["autoscaling"][0]["scale_down_stabilization"] = stabilization
    else:
        del data["autoscaling"][0]["scale_down_stabilization"]  # the default
    return Scenario.model_validate(data)


def test_default_scale_down_pace_keeps_a_rising_ramps_scale_ups() -> None:
    ramp_end = 60.0
    downs = [t for t, d in _scales(_run(_tight_band(""), 0)) if d["action"] == "down"]
    assert [t for t in downs if t < ramp_end] == []
    # without the delay the same run removes a queue during the ramp (and must add it again)
    hasty = _scales(_run(_tight_band("0s"), 0))
    early = [t for t, d in hasty if d["action"] == "down" and t < ramp_end]
    assert early
    assert any(d["action"] == "up" and t > early[0] for t, d in hasty if t < ramp_end)
