"""Offline container images built from OS packages: ``mmdebstrap | docker import``.

Where no image registry is reachable, mqbed builds its own images from Debian packages (the
apt mirror *is* reachable): ``mqbed/rabbitmq``, ``mqbed/activemq``, ``mqbed/prometheus`` and
``mqbed/mqbed`` (Python + the mqbed dependencies in ``/opt/mqbed-venv``; the source is mounted
at ``/mqbed``). What goes into each image is listed in ``deploy/images/<name>.packages``; the
images and their settings are `testbed.backends.image_catalogue`.

Images are cached by content: the tag is a hash of the package list, the Debian suite, the
image's settings and this builder (plus ``pyproject.toml``'s dependencies and
``constraints.txt`` for ``mqbed/mqbed``). `ensure_image` skips the build when that tag exists,
and points ``:latest`` (what ``compose/docker-compose.offline.yml`` uses) at it.

Downloads are cached too: ``.deb`` files in ``CACHE/apt/<name>`` (mmdebstrap sync-in/sync-out)
and Python wheels in ``CACHE/wheels`` (``pip wheel`` on the host; the chroot installs them with
``--no-index``, so the build needs no network inside the chroot).

Command line: ``python -m testbed.backends.images [--list] [NAME ...]`` (or
``deploy/images/build.sh``).
"""

from __future__ import annotations

__all__ = [
    "IMAGE_NAMES",
    "ImageSpec",
    "ensure_image",
    "ensure_images",
    "image_ref",
    "image_specs",
    "main",
    "prune_images",
]

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testbed.backends.apt_sources import apt_mirrors, os_codename
from testbed.backends.image_catalogue import (
    IMAGE_NAMES,
    MQBED_VENV,
    REPO,
    REPOSITORY_PREFIX,
    ImageSpec,
    image_specs,
)
from testbed.exceptions import BackendError, ConfigurationError

CACHE = Path(os.environ.get("MQBED_IMAGE_CACHE", Path.home() / ".cache" / "mqbed" / "images"))
_BUILDER_VERSION = "3"  # bump when the build recipe changes in a way the hash cannot see
_DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
)

Log = Callable[[str], None]


# --------------------------------------------------------------------------- hashing


def _python_requirements() -> list[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return [str(d) for d in data["project"]["dependencies"]]


def content_hash(spec: ImageSpec, suite: str) -> str:
    """12 hex digits over everything that decides the image's content.

    That is the build recipe itself — the mmdebstrap command line this builder would run
    (package list, dpkg/apt options, hooks; cache and checkout paths and mirrors left out) and the
    ``docker import`` changes — plus, for ``mqbed/mqbed``, the Python requirements and
    ``constraints.txt``.
    """
    wheels = Path("/WHEELS") if spec.python_venv else None
    argv = _mmdebstrap_argv(spec, suite, Path("/TARGET"), wheels, mirrors=[])
    parts: list[Any] = [
        _BUILDER_VERSION,
        [a.replace(str(CACHE), "$CACHE").replace(str(REPO), "$REPO") for a in argv],
        list(spec.changes),
    ]
    if spec.python_venv:
        parts.append(_python_requirements())
    for path in spec.extra_inputs:
        parts.append(path.read_text(encoding="utf-8", errors="replace"))
    h = hashlib.sha256(json.dumps(parts, sort_keys=True).encode())
    return h.hexdigest()[:12]


def image_ref(name: str, suite: str | None = None) -> str:
    """``mqbed/<name>:<content hash>`` — the tag `ensure_image` builds (or finds)."""
    specs = image_specs()
    if name not in specs:
        raise ConfigurationError(f"image {name!r} is not one of {list(specs)}")
    spec = specs[name]
    return f"{spec.repository}:{content_hash(spec, suite or os_codename())}"


# --------------------------------------------------------------------------- building


def _run(argv: Sequence[str], log_path: Path, timeout: float, what: str) -> None:
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.ctime()}: {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = subprocess.run(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"{what} took longer than {timeout:.0f} s; log {log_path}") from exc
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise BackendError(f"{what} failed (exit {proc.returncode}); log {log_path}:\n{tail}")


def _wheelhouse(log_path: Path) -> Path:
    """Wheels for mqbed's dependencies (pinned by constraints.txt), built by the host's pip."""
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--wheel-dir",
        str(wheels),
        "-c",
        str(REPO / "constraints.txt"),
        *_python_requirements(),
    ]
    _run(argv, log_path, 1200, "pip wheel (mqbed dependencies)")
    return wheels


def _mmdebstrap_argv(
    spec: ImageSpec,
    suite: str,
    target: Path,
    wheels: Path | None,
    mirrors: Sequence[str] | None = None,
) -> list[str]:
    apt_cache = CACHE / "apt" / spec.name
    argv = [
        "mmdebstrap",
        "--variant=apt",
        "--mode=root",
        "--format=tar",
        f"--include={','.join(spec.packages())}",
        "--aptopt=APT::Install-Recommends false",
        *(f"--dpkgopt={opt}" for opt in _DPKG_EXCLUDES),
        *(f"--dpkgopt=path-exclude={path}" for path in spec.dpkg_excludes),
        "--skip=essential/unlink",
        # update-alternatives (openjdk's postinst) links man pages: the excluded dirs must exist
        '--setup-hook=mkdir -p "$1"/usr/share/man/man1',
        f'--setup-hook=mkdir -p "$1"/var/cache/apt/archives/ {apt_cache}',
        f"--setup-hook=sync-in {apt_cache} /var/cache/apt/archives/",
        f"--customize-hook=sync-out /var/cache/apt/archives {apt_cache}",
    ]
    if wheels is not None:
        requirements = " ".join(f"'{r}'" for r in _python_requirements())
        clean = "env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8"  # no host PIP_* settings
        argv += [
            '--customize-hook=mkdir -p "$1"/tmp/wheels',
            f"--customize-hook=sync-in {wheels} /tmp/wheels",
            f"--customize-hook=copy-in {REPO / 'constraints.txt'} /tmp",
            f'--customize-hook=chroot "$1" {clean} python3 -m venv {MQBED_VENV}',
            f'--customize-hook=chroot "$1" {clean} {MQBED_VENV}/bin/pip install --quiet '
            "--no-index --no-cache-dir --no-compile --find-links /tmp/wheels "
            f"-c /tmp/constraints.txt {requirements}",
            '--customize-hook=rm -rf "$1"/tmp/wheels "$1"/tmp/constraints.txt',
        ]
    argv += [suite, str(target), *(apt_mirrors(suite) if mirrors is None else mirrors)]
    return argv


def ensure_image(
    name: str,
    client: Any,
    *,
    suite: str | None = None,
    log: Log | None = None,
    timeout: float = 1500.0,
) -> str:
    """The image ref for `name`, built now unless an image with its content hash exists.

    `client` is a ``docker.DockerClient``. Also tags the result ``mqbed/<name>:latest``.
    Raises `BackendError` with the build log's tail on failure.
    """
    import docker.errors

    suite = suite or os_codename()
    spec = image_specs()[name]
    ref = image_ref(name, suite)
    repo, tag = ref.rsplit(":", 1)
    try:
        image = client.images.get(ref)
    except docker.errors.ImageNotFound:
        image = None
    if image is None:
        if shutil.which("mmdebstrap") is None:
            raise BackendError("mmdebstrap not found: install the mmdebstrap package")
        CACHE.mkdir(parents=True, exist_ok=True)
        log_path = CACHE / f"{name}-{tag}.log"
        log_path.unlink(missing_ok=True)
        t0 = time.monotonic()
        if log:
            log(f"building {ref} from Debian {suite} packages (log {log_path}) ...")
        wheels = _wheelhouse(log_path) if spec.python_venv else None
        tar = CACHE / f"{name}-{tag}.tar"
        (CACHE / "apt" / name).mkdir(parents=True, exist_ok=True)
        try:
            argv = _mmdebstrap_argv(spec, suite, tar, wheels)
            _run(argv, log_path, timeout, f"mmdebstrap for {ref}")
            changes = [*spec.changes, f"LABEL org.mqbed.image={name} org.mqbed.hash={tag}"]
            client.api.import_image_from_file(str(tar), repository=repo, tag=tag, changes=changes)
        finally:
            tar.unlink(missing_ok=True)
        image = client.images.get(ref)
        if log:
            size = image.attrs.get("Size", 0) / 1e6
            log(f"built {ref} in {time.monotonic() - t0:.0f} s ({size:.0f} MB)")
    image.tag(repo, "latest")
    return ref


def ensure_images(
    names: Sequence[str], client: Any, *, log: Log | None = None, parallel: int = 2
) -> dict[str, str]:
    """`ensure_image` for each of `names` (at most `parallel` builds at once) → name: ref."""
    unknown = [n for n in names if n not in IMAGE_NAMES]
    if unknown:
        raise ConfigurationError(f"images {unknown} are not among {list(IMAGE_NAMES)}")
    names = list(dict.fromkeys(names))
    with ThreadPoolExecutor(max(1, min(parallel, len(names))), "mqbed-image") as pool:
        futures = {n: pool.submit(ensure_image, n, client, log=log) for n in names}
        return {n: f.result() for n, f in futures.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m testbed.backends.images [--list | --prune] [--docker-host URL] [NAME ...]``.

    Without ``--docker-host`` the engine is ``$DOCKER_HOST``, else the system daemon, else
    mqbed's private dockerd (started for the build and stopped after; images stay in its root).
    """
    import docker
    import docker.errors

    from testbed.backends.run_engine import engine_for_run

    parser = argparse.ArgumentParser(
        prog="python -m testbed.backends.images",
        description="Build mqbed's offline images from Debian packages (skipped when present).",
    )
    parser.add_argument("names", nargs="*", help=f"images (default: all of {IMAGE_NAMES})")
    parser.add_argument("--list", action="store_true", help="print refs and whether present")
    parser.add_argument("--prune", action="store_true", help="remove outdated mqbed/* images")
    parser.add_argument("--docker-host", help="Docker API URL (default: see above)")
    args = parser.parse_args(argv)
    names = args.names or list(IMAGE_NAMES)
    say: Log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        with contextlib.ExitStack() as stack:
            host = args.docker_host or stack.enter_context(engine_for_run())
            client = docker.DockerClient(base_url=host, timeout=300)
            stack.callback(client.close)
            if args.list:
                for name in names:
                    ref = image_ref(name)
                    present = bool(client.images.list(name=ref))
                    print(f"{ref}\t{'present' if present else 'missing'}")
                return 0
            if args.prune:
                for ref in prune_images(client):
                    print(f"removed {ref}")
                return 0
            refs = ensure_images(names, client, log=say)
    except (BackendError, ConfigurationError, docker.errors.DockerException) as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    for ref in refs.values():
        print(ref)
    return 0


def prune_images(client: Any) -> list[str]:
    """Remove ``mqbed/<name>`` tags that are neither current nor ``latest``; return them."""
    import docker.errors

    current = {image_ref(n) for n in IMAGE_NAMES}
    removed: list[str] = []
    for name in IMAGE_NAMES:
        repository = f"{REPOSITORY_PREFIX}/{name}"
        for image in client.images.list(name=repository):
            for ref in image.tags:
                if ref.startswith(f"{repository}:") and ref not in current:
                    if ref.endswith(":latest"):
                        continue
                    with contextlib.suppress(docker.errors.APIError):
                        client.images.remove(ref)
                        removed.append(ref)
    return removed


if __name__ == "__main__":
    sys.exit(main())
