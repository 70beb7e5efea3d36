"""A calibration taken while other work kept the machine busy is not this machine's profile
for good (issue 13 point 2): the run that finds it cached measures again and keeps the quieter
of the two; the profile says how busy the machine was, and the accuracy document says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import testbed.calibration.machine as machine
from testbed.accuracy import _profile_text
from testbed.calibration.machine import ProfileChoice, cache_path, machine_profile, write_profile
from testbed.core.client_path import PROTOCOL, ClientPath
from testbed.core.profile import Profile, default_profile, load_profile


def _with_load(base: Profile, foreign: float | None, busy: bool, legacy: bool = False) -> Profile:
    cp = base.client_path
    assert cp is not None
    update: dict[str, Any] = {"foreign_cores": foreign, "busy": busy, "date": f"load {foreign}"}
    if legacy:  # written before `busy`/`foreign_cores` existed: only the rejection lines say it
        update = {"busy": False, "foreign_cores": None, "date": "legacy",
                  "rejected": ["every attempt was busy: kept the quietest (1.65 cores)"]}  # fmt: skip
    prov = cp.provenance.model_copy(update=update)
    cp = cp.model_copy(
        update={"provenance": prov, "cpu_per_op": None if legacy else 0.0003, "protocol": PROTOCOL}
    )
    return base.model_copy(update={"client_path": cp})


@pytest.fixture
def shipped() -> Profile:
    prof = default_profile("rabbitmq", "pika")
    assert prof.client_path is not None, "the shipped profile carries a client path"
    return prof


def _cache(home: Path, profile: Profile) -> Path:
    """`profile` as this machine's cached pika profile under `home`; its path."""
    path = cache_path(home, "rabbitmq", "3.10.8", "pika")
    write_profile(profile, path)
    return path


def _run(
    home: Path, monkeypatch: pytest.MonkeyPatch, measured: ClientPath, fresh: bool = False
) -> tuple[ProfileChoice, int, list[str]]:
    calls: list[int] = []
    lines: list[str] = []

    def measure(*_: Any, **__: Any) -> ClientPath:
        calls.append(1)
        return measured

    monkeypatch.setattr(machine, "measure_client_path", measure)
    choice = machine_profile(home, kind="rabbitmq", client="pika", version="3.10.8",
                             replicate=None, progress=lines.append,  # type: ignore[arg-type]
                             fresh=fresh)  # fmt: skip
    return choice, len(calls), lines


def test_a_quiet_cached_profile_is_used_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    _cache(tmp_path, _with_load(shipped, 0.1, False))
    busy_cp = _with_load(shipped, 1.5, True).client_path
    choice, calls, _ = _run(tmp_path, monkeypatch, busy_cp)  # type: ignore[arg-type]
    assert calls == 0 and choice.origin == "cached"


@pytest.mark.parametrize("legacy", [False, True])
def test_a_busy_cached_profile_is_measured_again_and_the_quieter_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile, legacy: bool
) -> None:
    path = _cache(tmp_path, _with_load(shipped, 1.2, True, legacy))
    quiet = _with_load(shipped, 0.2, False).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, quiet)  # type: ignore[arg-type]
    assert calls == 1 and choice.origin == "calibrated"
    assert any("measuring again" in line for line in lines), lines
    kept = load_profile(path).client_path
    assert kept is not None and kept.provenance.foreign_cores == 0.2
    assert not kept.provenance.taken_busy


def test_a_still_busier_measurement_does_not_replace_the_cached_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    path = _cache(tmp_path, _with_load(shipped, 0.9, True))
    busier = _with_load(shipped, 1.4, True).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, busier)  # type: ignore[arg-type]
    assert calls == 1 and choice.origin == "cached"
    assert load_profile(path).client_path.provenance.foreign_cores == 0.9  # type: ignore[union-attr]
    assert any("keeping the quieter" in line for line in lines), lines


def test_a_busy_first_calibration_warns_and_the_document_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    busy = _with_load(shipped, 1.65, True).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, busy)  # type: ignore[arg-type]
    assert calls == 1 and any(line.startswith("warning: other work") for line in lines), lines
    described = choice.describe()
    assert described["calibration_busy"] is True and described["foreign_cores"] == 1.65
    text = _profile_text({**described, "client_path": {"client": "pika", "date": "d"}})
    assert "while other work kept the machine busy (1.65 cores)" in text
    pooled = _profile_text({**described, "pooled": ["d0", "d1", "d2"]})
    assert "pooled with 2 earlier calibration(s) of the machine" in pooled


def test_a_cached_profile_without_the_cpu_per_operation_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    """A quiet profile cached before the Locust process's CPU was measured lacks the shared
    server's cost: the run measures again and keeps the new one, busy or not."""
    old = _with_load(shipped, 0.1, False)
    cp = old.client_path
    assert cp is not None
    update = {"client_path": cp.model_copy(update={"cpu_per_op": None})}
    path = _cache(tmp_path, old.model_copy(update=update))
    measured = _with_load(shipped, 0.3, False).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, measured)  # type: ignore[arg-type]
    assert calls == 1 and choice.origin == "calibrated"
    assert any("predates the measurement" in line for line in lines), lines
    assert load_profile(path).client_path.cpu_per_op == 0.0003  # type: ignore[union-attr]


def test_fresh_measures_a_quiet_cached_profile_again_and_keeps_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    """``--calibration fresh``: the machine's speed changes within minutes, so the run measures
    its client path now even when a quiet one is cached, and caches the new one."""
    path = _cache(tmp_path, _with_load(shipped, 0.1, False))
    new = _with_load(shipped, 0.3, False).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, new, fresh=True)  # type: ignore[arg-type]
    assert calls == 1 and choice.origin == "calibrated"
    assert any("--calibration fresh" in line and "load 0.1" in line for line in lines), lines
    assert load_profile(path).client_path.provenance.foreign_cores == 0.3  # type: ignore[union-attr]


def test_fresh_keeps_a_quiet_cached_profile_over_a_busy_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shipped: Profile
) -> None:
    path = _cache(tmp_path, _with_load(shipped, 0.1, False))
    busy = _with_load(shipped, 1.5, True).client_path
    choice, calls, lines = _run(tmp_path, monkeypatch, busy, fresh=True)  # type: ignore[arg-type]
    assert calls == 1 and choice.origin == "cached"
    assert load_profile(path).client_path.provenance.foreign_cores == 0.1  # type: ignore[union-attr]
    assert any("keeping the quieter" in line for line in lines), lines
