"""Which calibration profile a run's prediction uses, and why (``mqbed run --calibration``).

- an explicit ``--profile FILE``: that file;
- ``auto`` (the default): this machine's cached profile for the broker version and client
  library, measured first when there is none (:func:`testbed.calibration.machine.machine_profile`);
- ``cached``: the cached profile if there is one, else the shipped profile (never measures);
- ``shipped``: the profile shipped in ``deploy/calibration/``.
"""

from __future__ import annotations

__all__ = ["CALIBRATION_MODES", "ProfileChoice", "choose_profile", "profile_without_broker"]

from collections.abc import Callable, Sequence
from pathlib import Path

from testbed.calibration.client_path import Replicate
from testbed.calibration.machine import ProfileChoice, cached_profile, machine_profile
from testbed.core.profile import default_profile, load_profile, shipped_profile_path
from testbed.core.scenario import Scenario
from testbed.exceptions import ConfigurationError

CALIBRATION_MODES = ("auto", "cached", "shipped")


def _shipped(kind: str, client: str) -> ProfileChoice:
    path = shipped_profile_path(kind, client)
    return ProfileChoice(default_profile(kind, client), path, "shipped")


def profile_without_broker(
    scenario: Scenario, home: Path, profile: Path | None, calibration: str = "cached"
) -> ProfileChoice:
    """For ``mqbed predict`` (no broker at hand): explicit, else cached, else shipped."""
    kind, client = scenario.broker.kind, scenario.broker.client or ""
    if profile is not None:
        return ProfileChoice(load_profile(profile), Path(profile), "explicit")
    if calibration != "shipped":
        found = cached_profile(home, kind, client)
        if found is not None:
            return found
    return _shipped(kind, client)


def choose_profile(
    scenario: Scenario,
    home: Path,
    profile: Path | None,
    calibration: str,
    *,
    version: str,
    replicate: Replicate,
    progress: Callable[[str], None],
    broker_pids: Sequence[int] = (),
) -> ProfileChoice:
    """The profile of a live run's prediction (see the module docstring)."""
    if calibration not in CALIBRATION_MODES:
        raise ConfigurationError(
            f"--calibration {calibration!r}: expected one of {', '.join(CALIBRATION_MODES)}"
        )
    kind, client = scenario.broker.kind, scenario.broker.client or ""
    if profile is not None or calibration != "auto":
        return profile_without_broker(scenario, home, profile, calibration)
    return machine_profile(
        home,
        kind=kind,
        client=client,
        version=version,
        replicate=replicate,
        progress=progress,
        broker_pids=broker_pids,
    )
