"""The live control loop's decision path without a broker: the simulator and the live loop
make the same decisions — first scale-up included — from the same observations; the control
file drives the worker's slots and the alias router."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from emulator.sim.model import Model
from testbed.control.autoscaler import LiveAutoscaler
from testbed.core.clock import RunClock
from testbed.core.profile import default_profile
from testbed.core.scenario_loader import load_scenario
from testbed.observe.recorder import Recorder
from testbed.observe.stats import BrokerStats, QueueStats
from testbed.workload.scaling import AliasRouter, ScaleControl, user_count

LIB = Path(__file__).resolve().parents[2] / "workloads" / "scenarios"


class _NoPoller:
    def poll(self) -> BrokerStats:
        raise AssertionError("the test drives step() directly")

    def close(self) -> None:
        pass


def _sim_decisions(name: str) -> tuple[object, list[tuple[float, dict]]]:
    s = load_scenario(LIB / f"{name}.yaml")
    r = Model(s, default_profile(s.broker.kind), 0).run()
    rows = r.tables["events"].to_pylist()
    return s, [(e["t"], json.loads(e["detail"])) for e in rows if e["kind"] == "scale"]


def _stats_from(detail: dict, queue: str) -> BrokerStats:
    """The broker poll that shows what the simulated controller saw (from its event row)."""
    if "loads" in detail:  # elastic: per member queue
        queues = {
            q: QueueStats(int(v), 0, 1, ack_rate=detail["consumption"].get(q, 0.0))
            for q, v in detail["loads"].items()
        }
    else:
        queues = {
            queue: QueueStats(
                detail["ready"],
                detail["unacked"],
                1,
                publish_rate=detail["publish_rate"],
                ack_rate=detail["ack_rate"],
            )
        }
    return BrokerStats(t=0.0, broker="b", broker_up=True, queues=queues)


def _live(s, tmp_path: Path) -> LiveAutoscaler:  # type: ignore[no-untyped-def]
    rec = Recorder(tmp_path, "autoscale-r0", 0, batch_rows=1)
    return LiveAutoscaler(s, _NoPoller(), RunClock(0), rec, tmp_path / "control.json")


@pytest.mark.parametrize("name", ["mmpp-target-tracking", "elastic-ramp-500-pool0"])
def test_live_loop_makes_the_simulators_decisions(name: str, tmp_path: Path) -> None:
    s, sim = _sim_decisions(name)
    live = _live(s, tmp_path)
    sc = live.scalers[0]
    first_up = None
    for t, d in sim:
        got = live.step(sc, _stats_from(d, sc.queue), t).detail()
        assert (got["action"], got["current"], got["desired"]) == (
            d["action"],
            d["current"],
            d["desired"],
        ), f"t={t}: live {got} != sim {d}"
        assert got.get("starts") == d.get("starts") and got.get("stops") == d.get("stops")
        if "ratios" in d:  # from rounded inputs: equal to rounding
            assert got["ratios"] == pytest.approx(d["ratios"], abs=2e-3)
        if d["action"] == "up" and first_up is None:
            first_up = (t, got)
    assert first_up is not None, "the scenario must scale up"
    live.recorder.close()


def test_control_file_drives_slots_and_router(tmp_path: Path) -> None:
    s = load_scenario(LIB / "elastic-ramp-750-pool1.yaml")
    live = _live(s, tmp_path)
    sc = live.scalers[0]
    control = ScaleControl(tmp_path / "control.json")
    assert control.queue_of("workers", 0) == "work.0" and control.queue_of("workers", 1) is None
    # a load of 300 messages on the single member: scale up from the pool, ready at once
    stats = BrokerStats(
        0.0, "b", True, queues={"work.0": QueueStats(300, 5, 1, publish_rate=150.0, ack_rate=100.0)}
    )
    d = live.step(sc, stats, 10.0)
    assert d.action == "up" and d.starts[0].source == "pool"
    control._checked = -1.0  # bypass the 0.1 s re-read throttle
    assert control.queue_of("workers", 1) == "work.1"
    # the new member has ratio 0 until the next round; the router sends nothing there yet
    router = AliasRouter(control, "work", np.random.default_rng(1))
    assert {router() for _ in range(200)} == {"work.0"}
    stats = BrokerStats(
        0.0,
        "b",
        True,
        queues={
            "work.0": QueueStats(300, 5, 1, publish_rate=150.0, ack_rate=100.0),
            "work.1": QueueStats(0, 0, 1, ack_rate=100.0),
        },
    )
    live.step(sc, stats, 11.0)
    control._checked = -1.0
    picks = [router() for _ in range(4000)]
    # r = (100 - (305 - 152.5), 100 + 152.5)/200 -> (0, 1) after clipping: all to work.1
    assert set(picks) == {"work.1"}
    live.recorder.close()


def test_scaled_group_gets_one_locust_user_per_slot() -> None:
    s = load_scenario(LIB / "elastic-ramp-750-pool1.yaml")
    assert user_count(s) == 1 + 10
    s = load_scenario(LIB / "mmpp-target-tracking.yaml")
    assert user_count(s) == 1 + 10
