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

__all__ = ["calibrate_machine", "fit_table", "pool_profile_files"]

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from testbed.backends.base import BrokerEndpoint
from testbed.backends.provision import provisioned
from testbed.calibration.client_path import calibration_scenario, measure_client_path
from testbed.calibration.machine import cache_path, write_profile
from testbed.calibration.pooling import pool_client_paths
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
    draws: int = 1,
) -> tuple[Path, ClientPath]:
    """Run the parts and write the profile; returns its path and the measured client path.

    ``micro(path, endpoint)`` writes the micro-benchmark profile to ``path`` (None: keep the profile
    already at ``out``, or the shipped one, and measure the client path only).
    ``replicate_on(endpoint, say)`` gives the calibration run's replicate function.
    ``draws``: the client path is measured that many times, one after the other, and the draws
    are pooled (`testbed.calibration.pooling.pool_client_paths`: every table by the median of
    its quantiles). One draw is one sample of the machine's state; docs/accuracy.md
    (2026-12-02) measured how far one draw's tables move and what pooling three gains.
    """
    if draws < 1:
        raise ConfigurationError(f"--draws {draws}: measure the client path at least once")
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
        measured: list[ClientPath] = []
        for n in range(draws):
            if draws > 1:
                console_line(f"client path, draw {n + 1} of {draws}")
            measured.append(
                measure_client_path(
                    replicate_on(endpoint, console_line, home),  # type: ignore[arg-type]
                    kind=kind,
                    client=client,
                    broker_version=version,
                    host=base.host,
                    scale=scale,
                    progress=console_line,
                    command=f"mqbed calibrate --broker {kind} --client {client}"
                    + (f" --draws {draws}" if draws > 1 else ""),
                    broker_pids=[endpoint.pid] if endpoint.pid else [],
                )
            )
        cp = pool_client_paths(measured)
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


def pool_profile_files(files: Sequence[Path], out: Path) -> Path:
    """Write to ``out`` the last of ``files`` (oldest first) with the client paths of all of
    them pooled (`pool_client_paths`), as ``--draws`` pools the draws of one calibration."""
    profiles = [load_profile(f) for f in files]
    paths = [p.client_path for p in profiles]
    if not paths or any(cp is None for cp in paths):
        raise ConfigurationError(f"pooling {[str(f) for f in files]}: each needs a client path")
    pooled = pool_client_paths([cp for cp in paths if cp is not None])
    profile = profiles[-1].model_copy(update={"client_path": pooled})
    p = pooled.provenance
    header = _header(out, profile.broker.kind, p.client, p.broker_version, pooled)
    write_profile(profile, out, header)
    return out


def _header(target: Path, kind: str, client: str, version: str, cp: ClientPath) -> str:
    p = cp.provenance
    lines = [
        f"Calibration profile: {kind} {version}, client library {client}.",
        f"Client path measured on {p.hostname} ({p.host}) at {p.date} by `{p.command}`",
        f"in {p.wall_s:.0f} s; 1-minute load average {p.load_average}.",
    ]
    if len(p.pooled) > 1:
        lines.append(f"Tables pooled (median of each quantile) over {len(p.pooled)} draws: "
                     + ", ".join(p.pooled) + "; fit and wake-up points of the last.")  # fmt: skip
    if p.rejected:
        lines.append("Foreign load: " + "; ".join(p.rejected))
    lines.append("Goodness of fit (KS of each stored table to a held-out half of its sample):")
    lines += ["  " + line for line in fit_table(cp)]
    return "\n".join(lines)
