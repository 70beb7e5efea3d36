"""The report's autoscaling figures from hand-built record tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from testbed.core.scenario_loader import parse_scenario
from testbed.report.autoscaling import autoscaling_section, for_report

SCENARIO = """\
name: t
duration: 4s
drain_timeout: 2s
topology:
  queues: [{name: q}]
producers:
  - {name: p, queue: q, arrival: 10/s}
consumers:
  - {name: c, queue: q, count: 1, service_time: 10ms}
autoscaling:
  - {policy: target_tracking, target: c, target_value: 5, max_replicas: 4, sla_latency: 1s}
"""


def _scale(t: float, cur: int, des: int) -> dict:
    action = "up" if des > cur else "down" if des < cur else "none"
    return {
        "t": t,
        "kind": "scale",
        "target": "c",
        "detail": json.dumps({"action": action, "current": cur, "desired": des}),
        "replication": 0,
    }


def _write(
    run_dir: Path, side: str, consumers: list[int], scales: list[dict], lat: list[float]
) -> None:
    d = run_dir / side
    d.mkdir(parents=True)
    ts = pd.DataFrame(
        {"t": [float(i) for i in range(len(consumers))], "queue": "q", "consumers": consumers}
    )
    ts["replication"] = 0
    ts.to_parquet(d / "timeseries.parquet")
    pd.DataFrame(scales).to_parquet(d / "events.parquet")
    ids = [f"m{i}" for i in range(len(lat))]
    pd.DataFrame({"msg_id": ids, "t_publish": [0.5] * len(ids), "replication": 0}).to_parquet(
        d / "messages.parquet"
    )
    pd.DataFrame(
        {"msg_id": ids, "outcome": "acked", "latency_s": lat, "replication": 0}
    ).to_parquet(d / "deliveries.parquet")


def test_cost_mae_offsets_and_sla(tmp_path: Path) -> None:
    s, _ = parse_scenario(SCENARIO, "s.yaml")
    assert s is not None
    # measured: 1,1,3,3,1 consumers at t = 0..4; predicted 1,3,3,3,1
    _write(
        tmp_path,
        "measured",
        [1, 1, 3, 3, 1],
        [_scale(1.5, 1, 3), _scale(3.5, 3, 1)],
        [0.1, 2.0, 3.0],
    )
    _write(
        tmp_path,
        "predicted",
        [1, 3, 3, 3, 1],
        [_scale(0.5, 1, 3), _scale(3.5, 3, 1)],
        [0.1, 0.2, 1.5],
    )
    sec = autoscaling_section(tmp_path, s)
    assert sec is not None
    m, p = sec["sides"]["measured"], sec["sides"]["predicted"]
    # cost over the load window [0, 4): 1+1+3+3 = 8 and 1+3+3+3 = 10 consumer-seconds
    assert (m["cost_consumer_s"], p["cost_consumer_s"]) == (8.0, 10.0)
    assert sec["cost_rel_error"] == pytest.approx(0.25)
    # MAE over t = 0..4: |0| + |−2| + 0 + 0 + 0 = 2 over 5 windows
    assert sec["consumers_mae"] == pytest.approx(0.4)
    assert sec["scale_up_offsets_s"] == [1.0]
    assert [st["t"] for st in m["steps"]] == [1.5, 3.5]
    # SLA 1 s: two of three measured messages violate it, one of three predicted
    assert (m["violations"], p["violations"]) == (2, 1)
    assert m["fraction"] == pytest.approx(2 / 3)
    page = for_report(tmp_path, SCENARIO)
    assert page is not None and page["image"] and len(page["rows"]) == 2
    written = json.loads((tmp_path / "analysis" / "autoscaling.json").read_text())
    assert written["consumers_mae"] == pytest.approx(0.4)


def test_measured_consumers_come_from_the_workers_start_and_stop_events() -> None:
    from testbed.report.autoscaling import slot_series

    ev = pd.DataFrame(
        {
            "t": [0.05, 2.2, 2.2, 5.5, 0.0],
            "kind": [
                "consumer_start",
                "consumer_start",
                "consumer_start",
                "consumer_stop",
                "scale",
            ],
            "target": ["c.0.0", "c.0.1", "c.0.2", "c.0.2", "c"],
        }
    )
    s = slot_series(ev, "c", pd.Series([0.0, 1.0, 2.0, 3.0, 6.0]), 1.0)
    assert s["mean"].tolist() == [0.0, 1.0, 1.0, 3.0, 2.0]


def test_measured_consumers_are_averaged_over_replications_not_summed() -> None:
    from testbed.report.autoscaling import slot_series

    ev = pd.DataFrame(
        {
            "t": [0.0, 2.0, 0.0, 0.0, 4.0],
            "kind": ["consumer_start"] * 5,
            "target": ["c.0.0", "c.0.1", "c.0.0", "c.0.1", "c.0.2"],
            "replication": [0, 0, 1, 1, 1],
        }
    )  # replication 0: 1 then 2 consumers; replication 1: 2 then 3
    s = slot_series(ev, "c", pd.Series([1.0, 3.0, 5.0]), 1.0)
    assert s["mean"].tolist() == [1.5, 2.0, 2.5]
    assert s["min"].tolist() == [1.0, 2.0, 2.0] and s["max"].tolist() == [2.0, 2.0, 3.0]
