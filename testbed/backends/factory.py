"""Backends by name (`backend_for`) and provisioning for a run on the non-local backends:
``docker`` and ``external``.

`provision(scenario, home, run_id)` is a context manager yielding the run's `BrokerEndpoint`;
`provision_with_backend` also yields the `Backend` that owns the broker (a `DockerBackend`, for
broker faults), or None.

- **docker**: a healthy broker of the scenario's kind that ``mqbed up --backend docker``
  started in `home` is reused (unless the scenario injects broker faults); otherwise the run
  starts its own container (in ``home/runs/<run_id>``, owned by this process) and removes it
  afterwards. The engine is
  ``$DOCKER_HOST``, else the system daemon, else a private ``dockerd`` (see
  `testbed.backends.docker_engine`) that is stopped again after the run if the run started it.
  The engine is recorded in the run's home (`testbed.backends.run_engine`), so that ``mqbed
  down`` or the next run removes the containers and the daemon of a run killed by SIGKILL.
- **external**: the scenario's ``broker.urls``, else ``$MQBED_BROKER_URLS``; nothing is started
  or stopped.
"""

from __future__ import annotations

__all__ = [
    "BACKENDS",
    "backend_for",
    "provision",
    "provision_with_backend",
    "running_docker_endpoint",
]

import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from testbed.backends.base import Backend, BrokerEndpoint
from testbed.backends.docker import STATE_FILE, DockerBackend
from testbed.backends.external import ENV_URLS, ExternalBackend, urls_from_env
from testbed.backends.run_engine import RUN_ENGINE, engine_for_run
from testbed.core.scenario import Scenario
from testbed.exceptions import BackendError, ConfigurationError

BACKENDS = ("local", "docker", "external")
"""The backend names `backend_for` knows (``broker.backend``, ``mqbed up --backend``)."""


def backend_for(
    name: str,
    home: Path,
    *,
    docker_host: str | None = None,
    urls: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> Backend:
    """The backend `name` for the testbed in `home` (nothing is started or contacted yet).

    ``docker``: on the engine `docker_host` (default: the recorded one, else ``$DOCKER_HOST``),
    `log` receiving image-build progress. ``external``: the brokers of `urls` (default:
    ``$MQBED_BROKER_URLS``); `home` is not used.
    """
    if name == "local":
        from testbed.backends.local import LocalBackend

        return LocalBackend(home)
    if name == "docker":
        return DockerBackend(home, docker_host, log=log)
    if name == "external":
        if urls is None:
            return ExternalBackend(urls_from_env(), source=f"${ENV_URLS}")
        return ExternalBackend(urls)
    raise ConfigurationError(f"backend {name!r} is not one of {list(BACKENDS)}")


def _progress(message: str) -> None:
    print(f"mqbed: {message}", file=sys.stderr, flush=True)


def running_docker_endpoint(home: Path, kind: str) -> BrokerEndpoint | None:
    """A healthy `kind` broker that ``mqbed up --backend docker`` started in `home`, or None.

    Cheap when there is none: without ``home/docker-state.json`` no engine is contacted.
    """
    if not (Path(home) / STATE_FILE).exists():
        return None
    backend = DockerBackend(home)  # talks to the engine the containers were made on
    try:
        for ep in backend.endpoints():
            if ep.kind == kind and backend.is_healthy(ep.name):
                return ep
    except BackendError:
        return None
    finally:
        backend.close()
    return None


@contextmanager
def provision_with_backend(
    scenario: Scenario, home: Path, run_id: str
) -> Iterator[tuple[BrokerEndpoint, Backend | None]]:
    """The run's broker and the backend that owns it (None: not ours to break).

    Same contract as `testbed.backends.provision.provisioned` for the local backend: a healthy
    broker from ``mqbed up --backend docker`` is reused unless the scenario injects broker
    faults; then (or when none is up) the run starts its own container and removes it after.
    External brokers are never owned.
    """
    backend = scenario.broker.backend
    kind = scenario.broker.kind
    if backend == "external":
        urls = list(scenario.broker.urls)
        source = "broker.urls"
        if not urls:
            urls, source = urls_from_env(), f"${ENV_URLS}"
        yield ExternalBackend(urls, source=source).endpoint(kind, with_version=True), None
        return
    if backend != "docker":
        raise ConfigurationError(
            f"broker.backend {backend!r}: testbed.backends.factory provisions 'docker' and "
            "'external' (the local backend is provisioned by testbed.backends.provision)"
        )
    from testbed.backends.provision import needs_own_broker, run_memory_mb

    if not needs_own_broker(scenario):
        shared = running_docker_endpoint(home, kind)
        if shared is not None:
            yield shared, None
            return
    own_home = Path(home) / "runs" / run_id  # the run's home (`run_homes.run_home`)
    own_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        # the engine is recorded in the home until it is stopped: a killed run's is found
        with engine_for_run(record=own_home / RUN_ENGINE) as docker_host:
            own = DockerBackend(own_home, docker_host, log=_progress)
            memory_mb = run_memory_mb(scenario)
            try:
                endpoints = own.up([kind], timeout=120.0, detach=False, memory_limit_mb=memory_mb)
                yield endpoints[0], own
            finally:
                try:
                    own.down(timeout=30.0)
                finally:
                    own.close()
    finally:
        shutil.rmtree(own_home, ignore_errors=True)


@contextmanager
def provision(scenario: Scenario, home: Path, run_id: str) -> Iterator[BrokerEndpoint]:
    """The broker for one run on backend ``scenario.broker.backend`` (docker | external)."""
    with provision_with_backend(scenario, home, run_id) as (endpoint, _owner):
        yield endpoint
