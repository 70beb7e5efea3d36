"""Simulated actuation of the autoscaling policies (docs/models.md §7, §8): the same policy objects
on the simulated clock, `scale` events with their inputs, graceful scale-down losing nothing."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from emulator.sim.model import Model
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import load_scenario

LIB = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


def _run(name: str):  # type: ignore[no-untyped-def]
    s = load_scenario(LIB / f"{name}.yaml")
    return s, Model(s, default_profile(s.broker.kind), 0).run()


def _scales(result) -> list[tuple[float, dict]]:  # type: ignore[no-untyped-def]
    return [
        (e["t"], json.loads(e["detail"]))
        for e in result.tables["events"].to_pylist()
        if e["kind"] == "scale"
    ]


def _consumers(result) -> dict[float, int]:  # type: ignore[no-untyped-def]
    out: dict[float, int] = defaultdict(int)
    for row in result.tables["timeseries"].to_pylist():
        out[row["t"]] += row["consumers"]
    return dict(sorted(out.items()))


@pytest.fixture(scope="module")
def ramp():  # type: ignore[no-untyped-def]
    return _run("elastic-ramp-750-pool1")


def test_elastic_ramp_scales_up_when_average_load_exceeds_max_load(ramp) -> None:  # type: ignore[no-untyped-def]
    s, r = ramp
    scales = _scales(r)
    # one decision per 1 s period, from the first period to the end of the load and on while
    # the backlog drains (how long that takes is the prediction's, not this test's)
    times = [t for t, _ in scales]
    assert times == pytest.approx([float(i) for i in range(1, len(times) + 1)])
    assert times[-1] >= s.duration
    ups = [(t, d) for t, d in scales if d["action"] == "up"]
    assert ups, "the ramp to 750 msg/s must add queues"
    t0, first = ups[0]
    assert first["avg_load"] > 200 and first["reason"] == "scale_up"
    assert first["starts"][0]["source"] == "pool"  # one pre-provisioned host: no boot wait
    assert first["starts"][0]["ready_at"] == t0
    # 1 consumer cannot carry more than 100 msg/s: at 50 + 700 t/60 msg/s the queue crosses
    # 200 messages after ~10 s
    assert 5.0 < t0 < 20.0
    # every decision row carries its inputs
    assert {"loads", "ratios", "current", "desired", "publish_rate", "ack_rate"} <= set(first)


def test_elastic_ramp_reaches_the_peak_capacity_and_loses_nothing(ramp) -> None:  # type: ignore[no-untyped-def]
    s, r = ramp
    peak = max(_consumers(r).values())
    assert peak >= 8  # 750 msg/s over consumers of 100 msg/s
    assert r.ledger.lost == 0 and r.ledger.duplicated == 0
    # traffic went to the members by ratio: every member that ran received messages
    queues = {
        row["queue"] for row in r.tables["deliveries"].to_pylist()[:: max(1, r.messages // 2000)]
    }
    assert len(queues) >= 6


def test_forwarding_ratios_in_decisions_sum_to_one(ramp) -> None:  # type: ignore[no-untyped-def]
    _, r = ramp
    for _, d in _scales(r):
        assert sum(d["ratios"].values()) == pytest.approx(1.0, abs=1e-3)


def test_cold_start_waits_for_the_startup_delay() -> None:
    _, r = _run("elastic-ramp-500-pool0")
    ups = [(t, d) for t, d in _scales(r) if d["action"] == "up"]
    t0, first = ups[0]
    assert first["starts"][0]["source"] == "cold"
    assert first["starts"][0]["ready_at"] == pytest.approx(t0 + 5.0)
    # no second scale-up while the first host boots
    assert all(t >= t0 + 5.0 for t, _ in ups[1:])


def test_target_tracking_scales_both_ways_gracefully() -> None:
    s, r = _run("mmpp-target-tracking")
    scales = _scales(r)
    assert any(d["action"] == "up" for _, d in scales)
    downs = [d for _, d in scales if d["action"] == "down"]
    assert downs
    assert all(d["desired"] >= 1 for d in downs)
    # scale-down must lose nothing and duplicate nothing
    assert r.ledger.lost == 0 and r.ledger.duplicated == 0
    assert r.ledger.delivered_unique == r.ledger.sent


def test_same_seed_same_scaling_timeline() -> None:
    _, a = _run("mmpp-target-tracking")
    _, b = _run("mmpp-target-tracking")
    assert _scales(a) == _scales(b)


def test_faults_reach_consumers_added_by_scaling(tmp_path: Path) -> None:
    """A broker kill cuts every consumer's connection, also those the autoscaler started: each
    one records a `client_down` (the fault timeline adopts new consumers)."""
    import yaml

    data = yaml.safe_load((LIB / "mmpp-target-tracking.yaml").read_text())
    data.update(duration="60s")
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    s = load_scenario(f)
    # kill in the middle of the longest stretch with >= 2 scaled consumers (from a run without
    # the fault: the same seed gives the same timeline up to the kill), not at a fixed time
    calm = Model(s, default_profile(s.broker.kind), 0).run()
    at = _middle_of_scaled_stretch(calm, s.consumers[0].count + 2)
    data.update(faults=[{"kind": "broker_kill", "at": f"{at:.2f}s", "duration": "1s"}])
    f.write_text(yaml.safe_dump(data))
    s = load_scenario(f)
    r = Model(s, default_profile(s.broker.kind), 0).run()
    e = r.tables["events"].to_pandas()
    cut = set(e[e.kind == "client_down"].target)
    group = s.consumers[0].name
    scaled = {c for c in cut if c.startswith(f"{group}-")}
    scaled = {c for c in scaled if int(c.rsplit("-", 1)[1]) >= s.consumers[0].count}
    assert scaled, f"no consumer started by scaling saw the kill: {sorted(cut)}"


def _middle_of_scaled_stretch(r, at_least: int) -> float:  # type: ignore[no-untyped-def]
    """Middle of the longest interval during which the group had >= `at_least` consumers."""
    e = r.tables["events"].to_pandas()
    scales = e[e.kind == "scale"].sort_values("t")
    best, start = (0.0, 0.0), None
    for t, detail in zip(scales.t, scales.detail, strict=True):
        n = json.loads(detail)["desired"]
        if n >= at_least and start is None:
            start = t
        elif n < at_least and start is not None:
            best = max(best, (t - start, (start + t) / 2))
            start = None
    assert best[0] > 2.0, f"the group never held {at_least} consumers for 2 s"
    return best[1]
