"""A run's own broker kills join this machine's cached restart time
(`testbed.calibration.restart_observed`)."""

from __future__ import annotations

import io
import json
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from testbed.calibration.machine import ProfileChoice, write_profile
from testbed.calibration.restart_observed import (
    POOL_LIMIT,
    learn_restart_time,
    observed_heals,
    pooled_restart,
)
from testbed.core.profile import RestartTime, default_profile, load_profile


def _end(target: str, **detail: object) -> dict[str, object]:
    return {"t": 1.0, "kind": "fault_end", "target": target, "detail": json.dumps(detail)}


EVENTS = pd.DataFrame([
    _end("broker", kind="broker_kill", heal_s=7.5),
    _end("broker0", kind="stochastic", params={"mode": "kill"}, heal_s=10.5),
    _end("broker", kind="stochastic", params={"mode": "pause"}, heal_s=0.01),  # not a restart
    _end("broker", kind="broker_pause", heal_s=0.02),
    _end("broker", kind="broker_kill", heal_s=3.0, clipped=True),  # cut short by the run's end
    _end("broker", kind="broker_kill", heal_s=2.0, rolled_back=True),
    _end("consumers", kind="latency", heal_s=0.1),
    {"t": 2.0, "kind": "broker_up", "target": "broker", "detail": "{}"},
])  # fmt: skip


def test_observed_heals_are_the_kills_restart_times() -> None:
    assert observed_heals(EVENTS) == [7.5, 10.5]
    assert observed_heals(EVENTS.iloc[0:0]) == []


def test_pooling_is_the_mean_and_sd_of_the_union() -> None:
    known = RestartTime(mean=8.0, sd=1.0, samples=2)  # e.g. 7 and 9
    heals = [10.0, 12.0, 11.0]
    pooled = pooled_restart(known, heals, "2026-12-03T08:00:00+00:00")
    union = [7.0, 9.0, *heals]
    assert pooled.samples == 5 and pooled.date.startswith("2026-12-03")
    assert pooled.mean == pytest.approx(statistics.fmean(union))
    assert pooled.sd == pytest.approx(statistics.pstdev(union))
    assert pooled_restart(known, [], "x") is known


def test_old_samples_fade_beyond_the_pool_limit() -> None:
    known = RestartTime(mean=5.0, sd=0.0, samples=POOL_LIMIT)
    heals = [9.0] * (POOL_LIMIT // 2)
    pooled = pooled_restart(known, heals, "d")
    assert pooled.samples == POOL_LIMIT and pooled.mean == pytest.approx(7.0)
    only_new = pooled_restart(known, [9.0] * (POOL_LIMIT + 3), "d")
    assert only_new.mean == pytest.approx(9.0) and only_new.samples == POOL_LIMIT + 3


def _said(console: Console) -> list[str]:
    return [line for line in console.export_text().splitlines() if line]


def _console() -> Console:
    return Console(file=io.StringIO(), record=True, width=400)


def _cached(tmp_path: Path, restart: RestartTime | None) -> Path:
    path = tmp_path / "home" / "calibration" / "vm-rabbitmq-3.10.8-pika.yaml"
    profile = default_profile("rabbitmq", "pika").model_copy(update={"restart_time": restart})
    write_profile(profile, path, "a test's cached profile")
    measured = tmp_path / "run" / "measured"
    measured.mkdir(parents=True)
    EVENTS.to_parquet(measured / "events.parquet")
    return path


def test_a_finished_run_updates_the_cached_profile_it_predicted_with(tmp_path: Path) -> None:
    path = _cached(tmp_path, RestartTime(mean=8.5, sd=1.2, samples=2, kill_s=0.01))
    console = _console()
    choice = ProfileChoice(load_profile(path), path, "cached")
    learn_restart_time(choice, tmp_path / "run" / "measured", "auto", console)
    said = _said(console)
    after = load_profile(path).restart_time
    assert after is not None and after.samples == 4 and after.kill_s == 0.01
    assert after.mean == pytest.approx((2 * 8.5 + 7.5 + 10.5) / 4)
    var = (2 * (1.2**2 + (8.5 - after.mean) ** 2) + (7.5 - after.mean) ** 2
           + (10.5 - after.mean) ** 2) / 4  # fmt: skip
    assert after.sd == pytest.approx(math.sqrt(var))
    assert len(said) == 1 and "8.5 s (2 samples) -> 8.8 s with this run's 2 kills" in said[0]


@pytest.mark.parametrize(
    ("origin", "mode", "restart"),
    [
        ("explicit", "auto", RestartTime(mean=8.5)),  # a user's file is never written
        ("shipped", "auto", RestartTime(mean=8.5)),
        ("cached", "cached", RestartTime(mean=8.5)),  # cached mode never measures or writes
        ("cached", "auto", None),  # no measured figure to pool into: the next run measures one
    ],
)
def test_profiles_not_this_machines_measured_cache_are_left_alone(
    tmp_path: Path, origin: str, mode: str, restart: RestartTime | None
) -> None:
    path = _cached(tmp_path, restart)
    before = path.read_text()
    console = _console()
    learn_restart_time(ProfileChoice(load_profile(path), path, origin), tmp_path / "run" /
                       "measured", mode, console)  # fmt: skip
    assert path.read_text() == before and _said(console) == []


def test_a_failure_to_pool_is_said_and_loses_nothing(tmp_path: Path) -> None:
    path = _cached(tmp_path, RestartTime(mean=8.5))
    (tmp_path / "run" / "measured" / "events.parquet").write_text("not parquet")
    before = path.read_text()
    console = _console()
    learn_restart_time(ProfileChoice(load_profile(path), path, "cached"), tmp_path / "run" /
                       "measured", "auto", console)  # fmt: skip
    said = _said(console)
    assert path.read_text() == before
    assert len(said) == 1 and said[0].startswith("broker restart times not pooled")
