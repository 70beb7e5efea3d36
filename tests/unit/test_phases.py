"""The phases of a run and its load window (`testbed.core.phases`), one rule for both sides."""

from __future__ import annotations

import math

import pyarrow as pa

from emulator.sim.model import Model
from emulator.sim.summary import load_window as simulated_window
from testbed.core.phases import PHASE, load_window, phase_marks
from testbed.core.profile import Profile
from testbed.core.scenario_loader import parse_scenario


def test_phase_marks_are_warmup_load_drain() -> None:
    assert phase_marks(5, 60) == [(0.0, "warmup"), (5.0, "load"), (60.0, "drain")]
    assert phase_marks(0, 30.5) == [(0.0, "load"), (30.5, "drain")]


def test_the_earliest_load_and_drain_make_the_window() -> None:
    assert load_window([(2.0, "load"), (12.0, "drain")]) == (2.0, 12.0)
    marks = [(9.0, "load"), (20.0, "drain"), (2.0, "load"), (12.0, "drain"), (30.0, "end")]
    assert load_window(marks) == (2.0, 12.0)  # by time, not by row order
    assert load_window([(0.0, "warmup"), (1.0, None)]) == (0.0, math.inf)
    assert load_window([(3.0, "drain")], (1.0, 2.0)) == (1.0, 3.0)


def test_the_simulator_writes_the_marks_and_reads_its_window_by_the_rule() -> None:
    scenario, issues = parse_scenario(
        "name: p\nduration: 4s\nwarmup: 1s\ntopology: {queues: [{name: q}]}\n"
        "producers: [{name: a, queue: q, arrival: 20/s}]\n"
        "consumers: [{name: c, queue: q, service_time: 1ms}]\n"
    )
    assert scenario is not None, issues
    model = Model(scenario, Profile.zero(), 0)
    events = model.rec.small_tables()["events"].to_pylist()
    phases = [(e["t"], e["detail"]) for e in events if e["kind"] == PHASE]
    assert phases == [
        (0.0, '{"phase": "warmup"}'),
        (1.0, '{"phase": "load"}'),
        (4.0, '{"phase": "drain"}'),
    ]
    assert all(e["target"] == "p" for e in events if e["kind"] == PHASE)
    table = pa.Table.from_pylist(events)
    assert simulated_window(table) == load_window(phase_marks(1, 4)) == (1.0, 4.0)
