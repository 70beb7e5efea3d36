"""The broker restart time is a measured figure of the machine, not only a constant: a
profile's ``restart_time`` drives the simulator's outage after a kill, the closed-form QoS
inputs and the prediction's header; a run measures it when its scenario kills the broker and
this machine's cached profile has none (issue 13: restart time per broker from calibration)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.predict import predict
from emulator.sim.model import Model
from testbed.analysis.qos import closed_form_inputs
from testbed.calibration.choice import choose_profile
from testbed.calibration.machine import cache_path, write_profile
from testbed.calibration.restart import needs_restart_time
from testbed.core.availability import RESTART_S, restart_seconds
from testbed.core.profile import ColdStart, Profile, RestartTime, default_profile, load_profile
from testbed.core.scenario_loader import parse_scenario

BASE = """
name: rt
seed: 3
duration: 10s
drain_timeout: 20s
topology: {queues: [{name: q}]}
producers: [{name: p, queue: q, arrival: 10/s, size: 100B}]
consumers: [{name: c, queue: q, service_time: 1ms}]
"""
MEASURED = RestartTime(
    mean=11.5, sd=2.0, samples=2, date="2026-11-25T00:00:00+00:00", kill_s=0.03,
    cold=ColdStart(extra_s=1e-3, tau_s=3.0, rate=50.0),
)  # fmt: skip


def scenario(faults: str = "") -> object:
    s, issues = parse_scenario(BASE + (f"faults:\n{faults}" if faults else ""))
    assert s is not None, [str(i) for i in issues]
    return s


@pytest.mark.parametrize(
    ("faults", "needed"),
    [
        ("", False),
        ("  - {kind: broker_kill, at: 2s, duration: 1s}\n", True),
        ("  - {kind: broker_restart, at: 2s}\n", True),
        ("  - {kind: broker_pause, at: 2s, duration: 1s}\n", False),
        ("  - {kind: stochastic, target: broker, mttf: 5s, mttr: 1s}\n", True),
        ("  - {kind: stochastic, target: broker, mttf: 5s, mttr: 1s, mode: pause}\n", False),
        ("  - {kind: stochastic, target: c, mttf: 5s, mttr: 1s, mode: crash}\n", False),
    ],
)
def test_which_scenarios_need_the_restart_time(faults: str, needed: bool) -> None:
    assert needs_restart_time(scenario(faults).faults) is needed  # type: ignore[attr-defined]


def test_a_measured_restart_time_replaces_the_constant() -> None:
    prof = default_profile("rabbitmq", "pika")
    assert prof.restart_time is None
    assert restart_seconds("rabbitmq", prof) == RESTART_S["rabbitmq"]
    measured = prof.model_copy(update={"restart_time": MEASURED})
    assert restart_seconds("rabbitmq", measured) == 11.5


def test_the_simulated_outage_lasts_the_measured_restart() -> None:
    s = scenario("  - {kind: broker_kill, at: 2s, duration: 1s}\n")
    quick = RestartTime(mean=4.25, samples=1)  # back at 7.25 s, inside the 10 s of load
    prof = Profile.zero().model_copy(update={"restart_time": quick})
    ev = Model(s, prof, 0).run().tables["events"].to_pandas()  # type: ignore[arg-type]
    up = ev[ev.kind == "broker_up"].t.tolist()
    assert up == [pytest.approx(2.0 + 1.0 + 4.25)], up


def test_closed_form_qos_inputs_take_the_prediction_s_restart() -> None:
    text = (Path(__file__).parents[2] / "workloads/scenarios/qos-pcm.yaml").read_text()
    s, _ = parse_scenario(text)
    assert closed_form_inputs(s)["restart_s"] == RESTART_S["rabbitmq"]  # type: ignore[index]
    assert closed_form_inputs(s, 14.0)["restart_s"] == 14.0  # type: ignore[index]


def test_the_prediction_says_which_restart_time_it_used(tmp_path: Path) -> None:
    path = tmp_path / "rt.yaml"
    path.write_text(BASE + "faults:\n  - {kind: broker_kill, at: 2s, duration: 1s}\n")
    prof = tmp_path / "p.yaml"
    measured = default_profile("rabbitmq", "pika").model_copy(update={"restart_time": MEASURED})
    write_profile(measured, prof)
    predict(path, tmp_path / "out", profile=prof, replications=1)
    head = json.loads((tmp_path / "out" / "predicted" / "summary.json").read_text())["profile"]
    assert head["restart_s"] == 11.5 and head["restart_measured"] is True


def test_a_run_measures_the_restart_once_and_caches_it(tmp_path: Path) -> None:
    """``auto``: this machine's cached profile lacks the figure -> the probe measures it and the
    cached file keeps it (its header too); the next run reads it without measuring."""
    s = scenario("  - {kind: broker_kill, at: 2s, duration: 1s}\n")
    cached = cache_path(tmp_path, "rabbitmq", "3.10.8", "pika")
    # the shipped profile is of the current calibration (test_client_path checks it), so a
    # copy of it stands for a current cache entry
    write_profile(default_profile("rabbitmq", "pika"), cached, "measured here, by hand")
    calls: list[int] = []

    def probe() -> RestartTime:
        calls.append(1)
        return MEASURED

    def choose() -> Profile:
        return choose_profile(
            s, tmp_path, None, "auto", version="3.10.8", replicate=None,  # type: ignore[arg-type]
            progress=lambda _: None, restart_probe=probe,
        ).profile  # fmt: skip

    assert choose().restart_time == MEASURED
    assert load_profile(cached).restart_time == MEASURED
    assert "measured here, by hand" in cached.read_text()
    assert choose().restart_time == MEASURED and len(calls) == 1


@pytest.mark.parametrize("missing", ["kill_s", "cold"])
def test_a_restart_time_measured_before_kills_were_timed_is_measured_again(
    tmp_path: Path, missing: str
) -> None:
    """A cached figure without ``kill_s`` or ``cold`` (an older calibration) lacks the kill's
    teardown or the slow start the simulator now needs: the probe runs again and the cache
    gets the new figure."""
    s = scenario("  - {kind: broker_kill, at: 2s, duration: 1s}\n")
    cached = cache_path(tmp_path, "rabbitmq", "3.10.8", "pika")
    old = MEASURED.model_copy(update={missing: None})
    write_profile(
        default_profile("rabbitmq", "pika").model_copy(update={"restart_time": old}), cached
    )
    calls: list[int] = []

    def probe() -> RestartTime:
        calls.append(1)
        return MEASURED

    chosen = choose_profile(
        s, tmp_path, None, "auto", version="3.10.8", replicate=None,  # type: ignore[arg-type]
        progress=lambda _: None, restart_probe=probe,
    ).profile  # fmt: skip
    assert chosen.restart_time == MEASURED and calls == [1]
    assert load_profile(cached).restart_time == MEASURED


def test_fresh_measures_the_restart_time_again_and_auto_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fresh`` measures the machine again, the restart time with the client path: a cached
    figure, however current its shape (``kill_s`` known), is replaced; ``auto`` keeps it."""
    import testbed.calibration.machine as machine

    s = scenario("  - {kind: broker_kill, at: 2s, duration: 1s}\n")
    cached = cache_path(tmp_path, "rabbitmq", "3.10.8", "pika")
    old = MEASURED.model_copy(update={"mean": 5.16, "date": "2026-11-28T00:56:15+00:00"})
    base = default_profile("rabbitmq", "pika")
    write_profile(base.model_copy(update={"restart_time": old}), cached)
    assert base.client_path is not None
    now = base.client_path.provenance.model_copy(update={"hostname": "here", "foreign_cores": 0.01})
    fresh_path = base.client_path.model_copy(update={"provenance": now})
    monkeypatch.setattr(machine, "measure_client_path", lambda *_, **__: fresh_path)
    calls: list[int] = []

    def probe() -> RestartTime:
        calls.append(1)
        return MEASURED

    def choose(mode: str) -> Profile:
        return choose_profile(
            s, tmp_path, None, mode, version="3.10.8", replicate=None,  # type: ignore[arg-type]
            progress=lambda _: None, restart_probe=probe,
        ).profile  # fmt: skip

    assert choose("auto").restart_time == old and calls == []
    assert choose("fresh").restart_time == MEASURED and calls == [1]
    assert load_profile(cached).restart_time == MEASURED  # the cache keeps the new figure
    assert choose("fresh").restart_time == MEASURED and calls == [1, 1]  # each fresh run
