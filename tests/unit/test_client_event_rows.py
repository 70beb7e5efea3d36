"""A client crash leaves the same ``events`` rows live and simulated (`testbed.core.client_events`):
the live crash-plan runner (`run_crash_plan`, on stand-in instances) and the simulator, given
one scenario, write ``fault_start`` and ``fault_end`` rows with the same names, targets and
detail keys. Before the shared builders the simulated ``fault_start`` had an ``index`` the live
one lacked."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from emulator.sim.model import Model
from testbed.core.client_events import client_down, client_up, crash_ended, on
from testbed.core.faultplan import plan_crashes
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario
from testbed.workload.crashes import ClientCrash, run_crash_plan

SCENARIO = """
name: crash-rows
duration: 6s
warmup: 1s
topology:
  queues: [{name: q}]
producers:
  - {name: src, queue: q, arrival: {kind: constant, rate: 50/s}}
consumers:
  - {name: c, queue: q, count: 2, service_time: {kind: deterministic, value: 1ms}}
faults:
  - {kind: consumer_crash, target: c, at: 2s, count: 1, restart_after: 1s}
"""


@dataclass
class _Instance:
    name: str
    index: int


def _live_rows(s: Any) -> list[tuple[str, str, dict[str, Any]]]:
    rows: list[tuple[str, str, dict[str, Any]]] = []
    crashed: list[tuple[_Instance, ClientCrash]] = []
    plans = sorted(plan_crashes(s, 7, {"c": 2}, 6.0))
    group = [_Instance("c.0.0", 0), _Instance("c.0.1", 1)]
    clock = iter(range(100))
    run_crash_plan(
        plans, lambda: float(next(clock)), lambda g: group, lambda v, e: crashed.append((v, e)),
        lambda t, name, target, detail: rows.append((name, target, detail)), sleep=lambda _: None,
    )  # fmt: skip
    ((victim, exc),) = crashed
    # the restart, as `ConsumerUser` records it once the instance is back
    rows.append(on("c", crash_ended(exc.kind, victim.name)))
    return rows


def _simulated_rows(s: Any) -> list[tuple[str, str, dict[str, Any]]]:
    res = Model(s, Profile.zero(), 0).run()
    ev = res.tables["events"].to_pylist()
    return [(e["kind"], e["target"], json.loads(e["detail"])) for e in ev
            if e["kind"] in ("fault_start", "fault_end")]  # fmt: skip


def test_a_crash_and_its_restart_are_the_same_rows_live_and_simulated() -> None:
    s, issues = parse_scenario(SCENARIO)
    assert s is not None, [str(i) for i in issues]
    live, sim = _live_rows(s), _simulated_rows(s)
    assert [(n, t) for n, t, _ in live] == [(n, t) for n, t, _ in sim] == [
        ("fault_start", "c"), ("fault_end", "c"),
    ]  # fmt: skip
    for (_, _, a), (_, _, b) in zip(live, sim, strict=True):
        assert sorted(a) == sorted(b), (a, b)
        assert a["kind"] == b["kind"] == "consumer_crash"
    assert live[0][2]["index"] == sim[0][2]["index"] == 0
    assert live[0][2]["restart_after"] == sim[0][2]["restart_after"] == 1.0
    assert len(live[0][2]["instances"]) == len(sim[0][2]["instances"]) == 1


def test_connection_rows_carry_what_the_report_reads() -> None:
    assert client_down("x" * 300) == ("client_down", {"error": "x" * 200})
    assert client_up(0.12345678) == ("client_up", {"downtime_s": 0.123457})
