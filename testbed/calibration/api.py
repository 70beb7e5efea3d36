"""`calibrate()`: the entry point behind ``mqbed calibrate`` (docs/models.md §9).

It measures a live broker through the adapters, assembles a `Profile` (``source: measured``)
and writes it as YAML plus a ``.points.json`` sidecar. The broker is either a running one in a
testbed home (``home=``) or one it starts itself: `LocalBackend` in a temporary home,
``detach=False`` (tied to this process), brought down at the end.
"""

from __future__ import annotations

__all__ = ["broker_version", "calibrate", "calibrate_endpoint", "default_command"]

import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from testbed.backends.base import BrokerEndpoint
from testbed.calibration.profile_files import write_outputs
from testbed.calibration.protocol import Protocol, run_protocol
from testbed.core.broker_kinds import KINDS, load
from testbed.exceptions import ConfigurationError


def default_command(
    kind: str, out_path: Path | str, duration: float, repeats: int, quick: bool
) -> str:
    """The ``mqbed calibrate`` command line equivalent to these arguments."""
    cmd = f"mqbed calibrate --broker {kind} --profile-out {out_path}"
    if quick:
        return cmd + " --quick"
    return cmd + f" --duration {duration:g} --repeats {repeats}"


def broker_version(endpoint: BrokerEndpoint) -> str:
    """The endpoint's broker version, asked from the broker when the backend did not say."""
    if endpoint.version:
        return endpoint.version
    facts = KINDS.get(endpoint.kind)
    if facts is None:
        return "unknown"
    try:
        if facts.management_api and endpoint.management_url:
            import requests

            r = requests.get(
                endpoint.management_url.rstrip("/") + "/api/overview",
                auth=(endpoint.username, endpoint.password),
                timeout=5,
            )
            r.raise_for_status()
            return str(r.json().get("rabbitmq_version") or "unknown")
        if facts.local_version is not None:
            return str(load(facts.local_version)() or "unknown")
    except Exception:
        pass
    return "unknown"


def _protocol(duration: float, repeats: int, quick: bool) -> Protocol:
    if quick:
        return Protocol.quick_protocol()
    if not duration > 0:
        raise ConfigurationError(f"calibrate: --duration must be > 0 s, got {duration!r}")
    if repeats < 1:
        raise ConfigurationError(f"calibrate: --repeats must be >= 1, got {repeats!r}")
    return Protocol.standard(duration, repeats)


def calibrate_endpoint(
    endpoint: BrokerEndpoint,
    out_path: Path | str,
    *,
    duration: float = 60.0,
    repeats: int = 3,
    quick: bool = False,
    progress: Callable[[str], None] | None = None,
    command: str | None = None,
    abort: threading.Event | None = None,
) -> Path:
    """Calibrate the broker at `endpoint`; write the profile to `out_path`; return it."""
    out = Path(out_path)
    protocol = _protocol(duration, repeats, quick)
    data = run_protocol(
        endpoint, protocol, version=broker_version(endpoint), progress=progress, abort=abort
    )
    write_outputs(
        data,
        out,
        command=command or default_command(endpoint.kind, out, duration, repeats, quick),
    )
    return out


def _running(home: Path, kind: str) -> BrokerEndpoint | None:
    from testbed.backends.local import LocalBackend

    backend = LocalBackend(home)
    for ep in backend.endpoints():
        if ep.kind == kind and backend.is_healthy(ep.name):
            return ep
    return None


def calibrate(
    broker_kind: str,
    out_path: Path | str,
    *,
    duration: float = 60.0,
    repeats: int = 3,
    quick: bool = False,
    home: Path | str | None = None,
    progress: Callable[[str], None] | None = None,
    command: str | None = None,
) -> Path:
    """Calibrate a `broker_kind` broker (docs/models.md §9) and write its profile to `out_path`.

    `quick`: a smoke test (2 s points, one repeat, three sizes; ignores duration/repeats).
    `home`: use the running broker of that testbed home; without one (or without `home`) a
    broker is started in a temporary home and stopped afterwards. `progress` receives progress
    lines (default: a rich progress bar on stderr). `command` is recorded in the profile
    header (default: the equivalent ``mqbed calibrate`` command line).
    """
    if broker_kind not in KINDS:
        raise ConfigurationError(
            f"calibrate: broker kind {broker_kind!r} is not one of {sorted(KINDS)}"
        )
    _protocol(duration, repeats, quick)  # validate before starting anything
    say = progress or (lambda line: None)
    if home is not None:
        ep = _running(Path(home).expanduser(), broker_kind)
        if ep is not None:
            say(f"using the running {broker_kind} node {ep.name} of {home}")
            return calibrate_endpoint(
                ep, out_path, duration=duration, repeats=repeats, quick=quick,
                progress=progress, command=command,
            )  # fmt: skip
        say(f"no running {broker_kind} in {home}: starting one in a temporary home")
    from testbed.backends.local import LocalBackend

    tmp = Path(tempfile.mkdtemp(prefix="mqbed-calibrate-"))
    backend = LocalBackend(tmp)
    try:
        (ep,) = backend.up([broker_kind], detach=False)
        say(f"started {broker_kind} {ep.version or ''} in {tmp} "
            f"({backend.startup_seconds.get(ep.name, 0):.1f} s)")  # fmt: skip
        return calibrate_endpoint(
            ep, out_path, duration=duration, repeats=repeats, quick=quick,
            progress=progress, command=command,
        )  # fmt: skip
    finally:
        try:
            backend.down()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
