"""Every scenario of the library (`workloads/scenarios/`) is runnable: the simulator predicts
each one, cut to a few seconds, with the shipped profile, and the prediction finishes (load and
drain phases written) and delivers messages.

The README promises an example per arrival kind, distribution and toxic that `mqbed predict
FILE` runs; tests/unit/test_scenario_library.py only validates the files. The cut is made with
the run's own overrides (`testbed.core.overrides.RunOverrides`: ``--duration``, ``--set``), so
the scenario is the one `mqbed run FILE --duration 4s` would run. What a plain cut would break
is handled here, never skipped:

- a fault timeline (`faults:` at 4 s ... 40 s) would start after the end of the cut run, which
  validation refuses: the timeline (``at``, ``duration``, ``until``, ``restart_after``) is
  compressed by the ratio of the cut, so each scheduled fault still happens, in the same order,
  and the prediction must write its ``fault_start``. A stochastic fault keeps its ``mttf`` and
  ``mttr``: the broker's restart (~6 s) is not compressed, so a broker killed every 2 s would
  never serve again and the cut run would measure nothing (tests/unit/test_sim_faults.py
  covers the stochastic schedules);
- a trace arrival reads its file beside the scenario: the file is loaded from its place in the
  library, so the trace is read (and looped) as written;
- a closed-loop arrival has no rate to cut: only its duration is cut.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from emulator.predict import predict
from testbed.core.overrides import RunOverrides
from testbed.core.scenario_loader import load_scenario
from testbed.core.units import parse_duration

LIBRARY = sorted((Path(__file__).resolve().parents[2] / "workloads" / "scenarios").glob("*.yaml"))
CUT_S = 4.0
"""Seconds of load each prediction simulates (the whole library takes a few seconds)."""
FAULT_TIMES = ("at", "duration", "until", "restart_after")


def _compressed_faults(faults: list[dict[str, Any]], ratio: float) -> list[str]:
    """``--set`` settings that compress every time of the fault timeline by `ratio`."""
    sets = []
    for i, fault in enumerate(faults):
        for key in FAULT_TIMES:
            if fault.get(key) is not None:
                seconds = parse_duration(str(fault[key])) * ratio
                sets.append(f"faults[{i}].{key}={seconds:.4f}")
    return sets


def cut_short(path: Path) -> tuple[RunOverrides, int]:
    """The overrides that cut `path` to CUT_S seconds of load, and how many scheduled
    (not stochastic) faults it still has."""
    data = yaml.safe_load(path.read_text())
    faults = data.get("faults") or []
    ratio = min(1.0, CUT_S / parse_duration(str(data["duration"])))
    sets = ["warmup=1s", "drain_timeout=10s", *_compressed_faults(faults, ratio)]
    scheduled = sum(f.get("kind") != "stochastic" for f in faults)
    return RunOverrides(sets=tuple(sets), duration=f"{CUT_S:g}s"), scheduled


def test_the_library_is_all_here() -> None:
    assert len(LIBRARY) >= 25  # a glob that found nothing would make the test below vacuous


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_every_library_scenario_predicts_cut_short(path: Path, tmp_path: Path) -> None:
    overrides, scheduled_faults = cut_short(path)
    scenario = load_scenario(path, overrides)
    assert scenario.duration == CUT_S and scenario.producers
    result = predict(scenario, tmp_path, method="simulate", replications=1, processes=1)
    (ledger,) = result.ledgers
    assert ledger.sent > 0 and ledger.delivered_unique > 0, ledger
    throughput = result.metric("throughput_msg_s")
    assert throughput is not None and throughput["predicted"] > 0, throughput
    summary = json.loads((tmp_path / "predicted" / "summary.json").read_text())
    assert summary["replications"] == 1 and summary["scenario"] == path.stem
    events = pq.read_table(tmp_path / "predicted" / "events.parquet").to_pylist()
    phases = [json.loads(e["detail"])["phase"] for e in events if e["kind"] == "phase"]
    assert phases == ["warmup", "load", "drain"], phases  # it ran to the end
    started = sum(e["kind"] == "fault_start" for e in events)
    assert started >= scheduled_faults, (started, scheduled_faults)
