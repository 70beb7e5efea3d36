"""A profile measured on the machine at hand, cached under the testbed home.

A prediction is only as good as its profile, and a profile measured on one machine is wrong on
another of the same class (two machines two days apart moved the quickstart's measured median
by 30 %). So a run predicts with a profile of *this* host, broker version and client library:
``<home>/calibration/<hostname>-<kind>-<version>-<client>.yaml``. When there is none, the run
measures the client path first (:mod:`testbed.calibration.client_path`, about a minute, with a
progress line) and stores the shipped profile of that broker with this machine's client path.
``mqbed predict`` without a broker uses the newest cached profile of this host, broker kind and
client library, else the shipped one.
"""

from __future__ import annotations

__all__ = ["cache_path", "cached_profile", "machine_profile", "write_profile", "ProfileChoice"]

import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.calibration import pooling
from testbed.calibration.client_path import Replicate, measure_client_path
from testbed.core.client_path import ClientPath
from testbed.core.profile import Profile, default_profile, load_profile, shipped_profile_path
from testbed.exceptions import MqbedError


@dataclass(frozen=True)
class ProfileChoice:
    profile: Profile
    path: Path
    origin: str
    """``"cached"``, ``"calibrated"`` (measured just now) or ``"shipped"``."""
    speed: dict[str, object] | None = None
    """This machine's speed at the run against the calibration's
    (`testbed.observe.cpu_speed.compare`; None: not compared)."""

    def describe(self) -> dict[str, object]:
        cp = self.profile.client_path
        out: dict[str, object] = {"path": str(self.path), "origin": self.origin}
        if cp is not None:
            p = cp.provenance
            out.update(
                client=cp.client,
                measured_on=p.hostname or p.host,
                measured_at=p.date,
                broker_version=p.broker_version,
                calibration_busy=p.taken_busy,
                foreign_cores=p.foreign_cores,
                pooled=list(p.pooled),
                machine_speed=self.speed,
            )
        else:
            out.update(measured_on=self.profile.host, measured_at=self.profile.date)
        return out


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def cache_path(home: Path, kind: str, version: str, client: str) -> Path:
    name = f"{_safe(socket.gethostname())}-{kind}-{_safe(version)}-{client}.yaml"
    return Path(home) / "calibration" / name


def cached_profile(
    home: Path, kind: str, client: str, version: str | None = None
) -> ProfileChoice | None:
    """This host's cached profile (exact version, or the newest of any version)."""
    if version is not None:
        path = cache_path(home, kind, version, client)
        return ProfileChoice(load_profile(path), path, "cached") if path.is_file() else None
    folder = Path(home) / "calibration"
    pattern = f"{_safe(socket.gethostname())}-{kind}-*-{client}.yaml"
    found = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime) if folder.is_dir() else []
    return ProfileChoice(load_profile(found[-1]), found[-1], "cached") if found else None


_BEGIN, _END = "--- client path ---", "--- end client path ---"


def _kept_header(path: Path, whole: bool = False) -> list[str]:
    """The leading comment lines of an existing profile, without an earlier client-path block
    (with it when `whole`)."""
    if not path.is_file():
        return []
    out, skipping = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if whole:
            out.append(line + "\n")
        elif text == _BEGIN:
            skipping = True
        elif text == _END:
            skipping = False
        elif not skipping:
            out.append(line + "\n")
    return out


def _body_without_client_path(text: str) -> str:
    """A profile file's YAML after its leading comments, without a top-level client_path."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    out, inside = [], False
    for line in lines[i:]:
        top = bool(line.strip()) and not line[0].isspace() and not line.startswith("#")
        if top:
            inside = line.startswith("client_path:")
        if not inside:
            out.append(line)
    return "".join(out)


def write_profile(profile: Profile, path: Path, header: str | None = "") -> None:
    """Atomically write ``profile`` as YAML. When ``path`` holds the same profile but for its
    client path, that file is kept verbatim (its comments explain each fitted figure) and only
    its client-path block and the header's client-path paragraph are replaced (``header=None``
    keeps the file's whole header, client-path paragraph included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    same_rest = False
    if path.is_file():
        try:
            old = load_profile(path)
            same_rest = old.model_copy(update={"client_path": None}) == profile.model_copy(
                update={"client_path": None}
            )
        except MqbedError:
            same_rest = False
    data = profile.model_dump(mode="json", exclude_none=True)
    if same_rest:
        rest = _body_without_client_path(path.read_text(encoding="utf-8")).rstrip("\n") + "\n"
        cp = {"client_path": data["client_path"]} if "client_path" in data else {}
        body = rest + (yaml.safe_dump(cp, sort_keys=False) if cp else "")
    else:
        body = yaml.safe_dump(data, sort_keys=False)
    if header is None:
        lines = "".join(_kept_header(path, whole=True))
    else:
        block = [_BEGIN, *header.splitlines(), _END] if header else []
        lines = "".join(_kept_header(path)) + "".join(f"# {line}\n" for line in block)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(lines + body, encoding="utf-8")
    tmp.replace(path)


def _cores(foreign: float | None) -> str:
    return "cores unknown" if foreign is None else f"{foreign:.2f} cores"


def _quieter(new: ClientPath, old: ClientPath) -> bool:
    """Whether `new` was measured with less foreign load than `old` (unknown counts as busy)."""
    a, b = new.provenance.foreign_cores, old.provenance.foreign_cores
    return b is None or (a is not None and a < b)


def _keep_old(new: ClientPath, old: ClientPath, lacking: bool, fresh: bool) -> bool:
    """Whether a new measurement loses to the cached one: never to one that lacks a
    measurement; a fresh one keeps the new unless only the new was taken busy; a re-measure of
    a busy profile keeps the quieter."""
    if lacking:
        return False
    if fresh:
        return new.provenance.taken_busy and not old.provenance.taken_busy
    return not _quieter(new, old)


def _pooled(
    path: Path, cp: ClientPath, old: ClientPath | None, progress: Callable[[str], None]
) -> ClientPath:
    """A fresh measurement pooled with the machine's recent ones (`testbed.calibration.
    pooling`); a cached profile from before pooling existed counts as the first draw."""
    if old is not None and not (
        old.provenance.pooled or old.provenance.taken_busy or pooling.has_draws(path)
    ):
        pooling.record_draw(path, old)
    pooled = pooling.pooled_with_recent(path, cp)
    if len(pooled.provenance.pooled) > 1:
        progress(f"pooled with {len(pooled.provenance.pooled) - 1} recent calibration(s) of "
                 f"this machine ({', '.join(pooled.provenance.pooled[:-1])})")  # fmt: skip
    return pooled


def machine_profile(
    home: Path,
    *,
    kind: str,
    client: str,
    version: str,
    replicate: Replicate,
    progress: Callable[[str], None] = lambda line: None,
    broker_pids: Sequence[int] = (),
    fresh: bool = False,
) -> ProfileChoice:
    """The cached profile for this host, broker version and client, measured first if none.

    A cached profile measured while other work kept the machine busy is measured again, and
    the quieter of the two kept: a busy calibration is not this machine's profile for good. One
    that lacks a measurement a current calibration makes (`ClientPath.missing`) is measured
    again. ``fresh``: the client path is measured again whatever the cache holds, and the new
    measurement kept unless it was taken busy where the cached one was not — pooled with the
    machine's recent calibrations (`testbed.calibration.pooling`): one is one draw."""
    found = cached_profile(home, kind, client, version)
    old = found.profile.client_path if found is not None else None
    lacks = old.missing() if old is not None else None
    again = lacks is not None or (fresh and old is not None)
    if found is not None and (old is None or not (old.provenance.taken_busy or again)):
        return found
    if lacks is not None:
        progress(f"this machine's cached profile predates the measurement of {lacks}: "
                 "measuring again")  # fmt: skip
    elif fresh and old is not None:
        progress(f"measuring this machine's client path again (--calibration fresh; the "
                 f"cached one is from {old.provenance.date})")  # fmt: skip
    elif old is not None:
        progress(f"this machine's cached profile was measured while other work kept it busy "
                 f"({_cores(old.provenance.foreign_cores)}): measuring again")  # fmt: skip
    base = found.profile if found is not None else default_profile(kind, client)
    cp = measure_client_path(
        replicate,
        kind=kind,
        client=client,
        broker_version=version,
        host=base.host,
        progress=progress,
        command="mqbed run (quick calibration of the client path)",
        broker_pids=broker_pids,
    )
    if found is not None and old is not None and _keep_old(cp, old, lacks is not None, fresh):
        progress("the machine is still busy; keeping the quieter cached measurement")
        return found
    path = cache_path(home, kind, version, client)
    if fresh and not cp.provenance.busy:
        cp = _pooled(path, cp, old, progress)
    if cp.provenance.busy:
        progress(f"warning: other work kept the machine busy while calibrating "
                 f"({_cores(cp.provenance.foreign_cores)}): the prediction carries that load; "
                 "the next run measures again")  # fmt: skip
    profile = base.model_copy(update={"client_path": cp})
    write_profile(
        profile,
        path,
        f"Calibration profile of this machine ({socket.gethostname()}): the shipped profile\n"
        f"{shipped_profile_path(kind, client).name} with the client path measured here on\n"
        f"{cp.provenance.date} ({kind} {version}, {client}). Delete this file to measure again.",
    )
    progress(f"client path calibrated in {cp.provenance.wall_s:.0f} s; cached in {path}")
    return ProfileChoice(profile, path, "calibrated")
