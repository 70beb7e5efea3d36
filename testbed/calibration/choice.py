"""Which calibration profile a run's prediction uses, and why (``mqbed run --calibration``).

- an explicit ``--profile FILE``: that file;
- ``auto`` (the default): this machine's cached profile for the broker version and client
  library, measured first when there is none (:func:`testbed.calibration.machine.machine_profile`);
- ``fresh``: as ``auto``, but the client path is measured again now, on the run's broker, and
  cached: a machine of this class changes speed by ±25 % within minutes (the client operations'
  CPU cost measured 45 % apart three hours apart on one machine), and a prediction is only as
  current as its profile; pooled with the machine's recent fresh calibrations
  (:mod:`testbed.calibration.pooling`), since one calibration is one draw of that speed;
- ``cached``: the cached profile if there is one, else the shipped profile (never measures);
- ``shipped``: the profile shipped in ``deploy/calibration/``.

A run whose scenario kills or restarts its broker also needs this machine's broker restart
time: in ``auto`` mode when the cached profile has none (or one measured before kills were
timed, without ``kill_s``), in ``fresh`` mode always, ``restart_probe`` measures it on the
run's broker (`testbed.calibration.restart`) and the cached profile keeps it. The restart time
moves with the machine as the client path does: a RabbitMQ restart measured at 5.16 s (two
kills, sd 0.004 s) took 3.0-4.9 s in the runs of one machine ten hours later (2026-11-28), so
the QoS experiments' prediction, with two or three kills a replication, had the broker down
~1.9 s longer per kill than it was and predicted PCM's throughput 15 % low. So after a run
the kills it timed join the cached figure (`testbed.calibration.restart_observed`), for the
next run's prediction.
"""

from __future__ import annotations

__all__ = ["CALIBRATION_MODES", "ProfileChoice", "choose_profile", "profile_without_broker"]

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from testbed.calibration.client_path import Replicate
from testbed.calibration.machine import (
    ProfileChoice,
    cached_profile,
    machine_profile,
    write_profile,
)
from testbed.core.profile import RestartTime, default_profile, load_profile, shipped_profile_path
from testbed.core.scenario import Scenario
from testbed.exceptions import ConfigurationError
from testbed.observe.cpu_speed import speed_check

CALIBRATION_MODES = ("auto", "fresh", "cached", "shipped")


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
    restart_probe: Callable[[], RestartTime] | None = None,
) -> ProfileChoice:
    """The profile of a live run's prediction (see the module docstring)."""
    if calibration not in CALIBRATION_MODES:
        raise ConfigurationError(
            f"--calibration {calibration!r}: expected one of {', '.join(CALIBRATION_MODES)}"
        )
    kind, client = scenario.broker.kind, scenario.broker.client or ""
    if profile is not None or calibration not in ("auto", "fresh"):
        return profile_without_broker(scenario, home, profile, calibration)
    choice = machine_profile(
        home,
        kind=kind,
        client=client,
        version=version,
        replicate=replicate,
        progress=progress,
        broker_pids=broker_pids,
        fresh=calibration == "fresh",
    )
    choice = replace(choice, speed=speed_check(choice.profile, progress))
    known = choice.profile.restart_time
    # (else from before kills were timed, or before the cold start after one was)
    current = known is not None and known.kill_s is not None and known.cold is not None
    if restart_probe is None or (current and calibration != "fresh"):
        return choice
    progress("measuring this machine's broker restart time (kill -> healthy)")
    measured = restart_probe()
    updated = choice.profile.model_copy(update={"restart_time": measured})
    write_profile(updated, choice.path, header=None)
    lost = f", killed in {(measured.kill_s or 0.0) * 1000:.0f} ms"
    lost += "" if measured.ack_loss_s is None else f", {measured.ack_loss_s * 1000:.0f} ms of acks"
    progress(f"broker restart time {measured.mean:.1f} s (sd {measured.sd:.1f} s, "
             f"{measured.samples} kills{lost}); cached in {choice.path}")  # fmt: skip
    return replace(choice, profile=updated)
