"""``mqbed calibrate``: measure a broker and client library on this machine -> a profile.

Two parts, each optional:

1. the broker micro-benchmarks (``testbed.calibration``: latency fits, write/read times,
   queue capacity, fan-out, memory) on a broker of a testbed home or a temporary one;
2. the client path through the live workload (:mod:`testbed.calibration.client_path`):
   delivery-delay and hold tables, with the goodness of fit of every point.

Without ``--profile-out`` the profile goes to this machine's cache under the testbed home (the
file a run's prediction then uses), never over the shipped profiles in ``deploy/calibration/``.
"""

from __future__ import annotations

__all__ = ["calibrate_machine", "fit_table"]

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from testbed.backends.base import BrokerEndpoint
from testbed.backends.provision import provisioned
from testbed.calibration.client_path import calibration_scenario, measure_client_path
from testbed.calibration.machine import cache_path, write_profile
from testbed.calibration.restart import RESTART_REPEATS, measure_restart
from testbed.core.broker_kinds import KINDS, kind_list
from testbed.core.client_path import ClientPath
from testbed.core.profile import Profile, default_profile, load_profile
from testbed.core.scenario import Scenario
from testbed.exceptions import ConfigurationError


def fit_table(cp: ClientPath) -> list[str]:
    """The goodness-of-fit table: per point, its sample size and the KS distance of the stored
    table to a held-out half of the sample."""
    lines = ["point                       n      KS (held-out half)"]
    for f in cp.fit:
        lines.append(f"{f.point:<26} {f.n:>6}  {f.ks:.3f}")
    return lines


def calibrate_machine(
    kind: str,
    *,
    client: str | None,
    home: Path,
    out: Path | None,
    micro: Callable[[Path, BrokerEndpoint], Path] | None,
    scale: float,
    replicate_on: Callable[..., object],
    console_line: Callable[[str], None],
) -> tuple[Path, ClientPath]:
    """Run the parts and write the profile; returns its path and the measured client path.

    ``micro(path, endpoint)`` writes the micro-benchmark profile to ``path`` (None: keep the profile
    already at ``out``, or the shipped one, and measure the client path only).
    ``replicate_on(endpoint, say)`` gives the calibration run's replicate function.
    """
    if kind not in KINDS:
        raise ConfigurationError(f"--broker {kind!r}: use {kind_list()}")
    client = client or KINDS[kind].default_client
    if client not in KINDS[kind].clients:
        raise ConfigurationError(f"--client {client!r} does not speak to {kind}")
    data = calibration_scenario(kind, client, scale)
    scenario = Scenario.model_validate(data)
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-calibration"
    restart = None
    with provisioned(scenario, home, run_id) as (endpoint, owner):
        version = endpoint.version or "unknown"
        target = out or cache_path(home, kind, version, client)
        if micro is not None:
            micro(target, endpoint)
            base: Profile = load_profile(target)
        elif target.is_file():
            base = load_profile(target)
        else:
            base = default_profile(kind, client)
        cp = measure_client_path(
            replicate_on(endpoint, console_line, home),  # type: ignore[arg-type]
            kind=kind,
            client=client,
            broker_version=version,
            host=base.host,
            scale=scale,
            progress=console_line,
            command=f"mqbed calibrate --broker {kind} --client {client}",
            broker_pids=[endpoint.pid] if endpoint.pid else [],
        )
        if owner is not None:  # a broker of our own (a shared `mqbed up` one is not ours to kill)
            repeats = 1 if scale < 1 else RESTART_REPEATS  # --quick: one kill
            restart = measure_restart(
                owner, endpoint.name, repeats, progress=console_line, client=client
            )
    update: dict[str, object] = {"client_path": cp}
    if restart is not None:
        update["restart_time"] = restart
    profile = base.model_copy(update=update)
    header = _header(target, kind, client, version, cp)
    write_profile(profile, target, header)
    return target, cp


def _header(target: Path, kind: str, client: str, version: str, cp: ClientPath) -> str:
    p = cp.provenance
    lines = [
        f"Calibration profile: {kind} {version}, client library {client}.",
        f"Client path measured on {p.hostname} ({p.host}) at {p.date} by `{p.command}`",
        f"in {p.wall_s:.0f} s; 1-minute load average {p.load_average}.",
    ]
    if p.rejected:
        lines.append("Foreign load: " + "; ".join(p.rejected))
    lines.append("Goodness of fit (KS of each stored table to a held-out half of its sample):")
    lines += ["  " + line for line in fit_table(cp)]
    return "\n".join(lines)
