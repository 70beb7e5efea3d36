"""The plugin's session state: settings, the brokers it started, one Spark session, runs.

`Testbed` starts each broker kind once per pytest session and per backend, on first use:

- ``local``: a `LocalBackend` in the testbed home (``detach=False``: the brokers die with
  pytest); a run finds it there, as ``mqbed run`` finds one ``mqbed up`` started. A scenario
  with broker faults (kill, pause, restart) gets a broker of its own, as with ``mqbed run``.
- ``testcontainers``: a container (`testbed.pytest_plugin.containers`); runs reach it as an
  external broker.

The Spark session that analyses runs is started on the first analysis and stopped (driver JVM
included) when the pytest session ends.
"""

from __future__ import annotations

__all__ = ["BACKENDS", "Settings", "Testbed"]

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.backends.base import BrokerEndpoint
from testbed.exceptions import ConfigurationError, MqbedError
from testbed.pytest_plugin.runs import MqbedResult, scenario_copy, set_fields

BACKENDS = ("local", "testcontainers", "auto")
"""``auto``: testcontainers when a Docker engine answers, else local."""


@dataclass(frozen=True)
class Settings:
    backend: str = "local"
    home: Path = Path(".mqbed")
    calibration: str = "cached"
    startup_timeout: float = 120.0


class Testbed:
    """Brokers and Spark for one pytest session; `close` releases them."""

    __test__ = False  # not a test class, though pytest would collect it by its name

    def __init__(self, settings: Settings, log: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.home = Path(settings.home).resolve()
        self.log = log or (lambda line: None)
        self.startup_seconds: dict[tuple[str, str], float] = {}
        """(backend, kind) → seconds from launch to serving clients, for brokers started here."""
        self._local: Any = None
        self._started: list[str] = []
        """Local nodes this session started (only those are stopped by `close`)."""
        self._containers: dict[str, Any] = {}
        self._spark: Any = None
        self._own_spark = False
        self._docker_error: str | None | bool = False  # False: not asked yet

    # -- brokers ------------------------------------------------------------------------------

    def resolve(self, backend: str | None) -> str:
        """The backend to use: `backend` (a marker's) else the settings'; ``auto`` resolved."""
        name = backend or self.settings.backend
        if name not in BACKENDS:
            raise ConfigurationError(
                f"mqbed backend {name!r}: expected one of {', '.join(BACKENDS)}"
            )
        if name == "auto":
            return "testcontainers" if self.docker_error() is None else "local"
        return name

    def docker_error(self) -> str | None:
        """Why testcontainers cannot be used here (None: a Docker engine answers)."""
        if self._docker_error is False:
            from testbed.pytest_plugin.containers import docker_engine_error

            self._docker_error = docker_engine_error()
        return self._docker_error  # type: ignore[return-value]

    def broker(self, kind: str, backend: str | None = None) -> BrokerEndpoint:
        """A healthy `kind` broker on `backend`, started now unless this session has one."""
        name = self.resolve(backend)
        t0 = time.monotonic()
        if name == "testcontainers":
            return self.container(kind).endpoint  # type: ignore[no-any-return]
        from testbed.backends.local import LocalBackend

        if self._local is None:
            self._local = LocalBackend(self.home)
        for ep in self._local.endpoints():  # `mqbed up`'s, an outer fixture's, or ours
            if ep.kind == kind and self._local.is_healthy(ep.name):
                return ep  # type: ignore[no-any-return]
        (endpoint,) = self._local.up([kind], detach=False, timeout=self.settings.startup_timeout)
        self._started.append(endpoint.name)
        seconds = self._local.startup_seconds.get(endpoint.name, time.monotonic() - t0)
        self.startup_seconds[("local", kind)] = seconds
        self.log(f"mqbed: local {kind} ready ({seconds:.1f} s)")
        return endpoint  # type: ignore[no-any-return]

    def container(self, kind: str) -> Any:
        """The `BrokerContainer` of `kind` (testcontainers backend), started now if need be."""
        if kind not in self._containers:
            error = self.docker_error()
            if error is not None:
                raise MqbedError(
                    f"the testcontainers backend needs a Docker engine: {error} "
                    "(set DOCKER_HOST, or use --mqbed-backend=local)"
                )
            from testbed.pytest_plugin.containers import start_broker_container

            started = start_broker_container(
                kind,
                self.home / "testcontainers" / kind,
                timeout=self.settings.startup_timeout,
                log=self.log,
            )
            self._containers[kind] = started
            self.startup_seconds[("testcontainers", kind)] = started.startup_seconds
            self.log(f"mqbed: {kind} container ready ({started.startup_seconds:.1f} s)")
        return self._containers[kind]

    # -- runs ---------------------------------------------------------------------------------

    def run(
        self,
        scenario: Path | str | Mapping[str, Any],
        out_dir: Path,
        *,
        backend: str | None = None,
        overrides: Mapping[str, Any],
    ) -> MqbedResult:
        """One live run of `scenario` with `overrides` on `backend` (see `runs`)."""
        from rich.console import Console

        from testbed.run import run_scenario

        name = self.resolve(backend)
        source = scenario if isinstance(scenario, Mapping) else Path(scenario)
        path = scenario_copy(source, out_dir / "scenario", overrides)
        kind = _kind_of(path)
        endpoint = self.broker(kind, name)
        if name == "testcontainers":  # reached as an external broker
            from testbed.pytest_plugin.containers import broker_url

            set_fields(path, {"broker.backend": "external", "broker.urls": [broker_url(endpoint)]})
        else:
            set_fields(path, {"broker.backend": "local"})
        console = Console(stderr=True, width=110)
        result = run_scenario(
            path,
            home=self.home,
            out_dir=out_dir,
            replications=overrides.get("replications"),
            predict=bool(overrides.get("predict", True)),
            workers=overrides.get("workers"),
            console=console,
            profile=overrides.get("profile"),
            calibration=self.settings.calibration,
        )
        out = MqbedResult(result.run_dir, path, name, list(result.ledgers))
        if overrides.get("report", True):
            self._analyse(out, console)
        return out

    def _analyse(self, out: MqbedResult, console: Any) -> None:
        from testbed.report.build import build_report, load_summary

        self.spark()  # build_report reuses the session's Spark (and leaves it running)
        (out.report,) = build_report([out.run_dir], console=console)
        out.summary = load_summary(out.run_dir)

    def spark(self) -> Any:
        """Spark for the analyses: one already running in this process (left running), else
        one started now and stopped by `close`."""
        if self._spark is None:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession

            from testbed.analysis.session import spark_session

            if SparkContext._active_spark_context is not None:
                self._spark = SparkSession.builder.getOrCreate()
            else:
                self._spark, self._own_spark = spark_session(), True
        return self._spark

    # -- the end ------------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop Spark and every broker this session started; the problems met (if any)."""
        problems: list[str] = []
        if self._spark is not None and self._own_spark:
            from testbed.analysis.session import stop_spark

            stop_spark(self._spark)
        self._spark = None
        for kind, started in list(self._containers.items()):
            try:
                started.stop()
            except Exception as exc:  # report every leftover, not only the first
                problems.append(f"{kind} container: {exc}")
        self._containers.clear()
        if self._started:
            problems.extend(self._stop_local())
        return problems

    def _stop_local(self) -> list[str]:
        """Stop the local nodes this session started; a full ``down`` when the home holds
        nothing else (else the others, not ours, keep running and ours stay recorded as
        stopped, for ``mqbed down``)."""
        local, mine = self._local, set(self._started)
        self._started = []
        try:
            if {ep.name for ep in local.endpoints()} <= mine:
                local.down()
            else:
                for name in sorted(mine):
                    local.stop_node(name)
        except MqbedError as exc:
            return [f"local brokers {sorted(mine)} in {self.home}: {exc}"]
        return []


def _kind_of(path: Path) -> str:
    """The scenario's broker kind (validated: a bad scenario fails here, before any broker)."""
    from testbed.core.scenario_loader import load_scenario

    return str(load_scenario(path).broker.kind)
