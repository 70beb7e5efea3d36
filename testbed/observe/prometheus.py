"""Debian's ``prometheus`` as a plain process for ``mqbed up --with-prometheus``, plus queries.

`PrometheusServer(home)` keeps everything below ``home/prometheus/``: the generated
``prometheus.yml``, the TSDB (``data/``), the log, the file-SD directory ``targets/`` where
mqbed exporters announce themselves (`testbed.observe.exporter`), and ``state.json`` with the
process identity (PID + start time + command-line marker), so `stop` works from any process
and only ever signals the process it started.

Scrape jobs: ``mqbed`` (every ``targets/*.json``; 1 s interval) and ``rabbitmq`` (each
RabbitMQ endpoint's prometheus plugin, ``/metrics`` aggregated and ``/metrics/per-object``).
Everything listens on 127.0.0.1.
"""

from __future__ import annotations

__all__ = ["PrometheusServer", "query", "wait_for_series"]

import json
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

from testbed.backends.base import BrokerEndpoint
from testbed.backends.node_driver import clean_env, log_tail
from testbed.backends.ports import LOOPBACK, pick_free_ports
from testbed.backends.procs import (
    ProcessRef,
    Spawner,
    is_alive,
    signal_process,
    start_ticks,
    wait_gone,
)
from testbed.core.broker_kinds import KINDS
from testbed.exceptions import BackendError, BrokerStartError

PROMETHEUS = "/usr/bin/prometheus"


def _yaml_list(items: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


class PrometheusServer:
    """One Prometheus process for the testbed in `home`."""

    def __init__(self, home: Path | str, *, scrape_interval: float = 1.0) -> None:
        self.base = Path(home).expanduser().resolve() / "prometheus"
        self.config_path = self.base / "prometheus.yml"
        self.state_path = self.base / "state.json"
        self.sd_dir = self.base / "targets"
        """Exporters write their file-SD JSON here (``MQBED_PROMETHEUS_SD_DIR``)."""
        self.log_path = self.base / "prometheus.log"
        self.scrape_interval = scrape_interval

    # ----------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int | None:
        state = self._state()
        return int(state["port"]) if state else None

    @property
    def url(self) -> str:
        port = self.port
        if port is None:
            raise BackendError(f"no Prometheus running for {self.base.parent}")
        return f"http://{LOOPBACK}:{port}"

    def running(self) -> bool:
        state = self._state()
        return state is not None and is_alive(ProcessRef.from_json(state["process"]))

    def start(
        self,
        brokers: Sequence[BrokerEndpoint] = (),
        *,
        port: int | None = None,
        timeout: float = 30.0,
        owned: bool = False,
    ) -> str:
        """Write the config, start Prometheus (unless it runs), wait until ready; return URL.

        `brokers`: RabbitMQ endpoints with a ``prometheus_url`` are scraped. `owned`: the
        process dies with this Python process (PR_SET_PDEATHSIG), as for local brokers.
        """
        if self.running():
            self.write_config(brokers)
            self.reload()
            return self.url
        if not Path(PROMETHEUS).exists():
            raise BackendError(f"{PROMETHEUS} not found: install the prometheus package")
        for sub in (self.base, self.sd_dir, self.base / "data"):
            sub.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.write_config(brokers)
        port = port or pick_free_ports(1)[0]
        argv = [
            PROMETHEUS,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.base / 'data'}",
            f"--web.listen-address={LOOPBACK}:{port}",
            "--storage.tsdb.retention.time=7d",
            "--log.level=warn",
        ]
        with open(self.log_path, "ab") as log:
            proc = Spawner.spawn(argv, env=clean_env({}), cwd=self.base, log=log, owned=owned)
        ref = ProcessRef(proc.pid, proc.pid, start_ticks(proc.pid) or 0, str(self.config_path))
        self.state_path.write_text(json.dumps({"port": port, "process": ref.to_json()}) + "\n")
        deadline = time.monotonic() + timeout
        url = f"http://{LOOPBACK}:{port}"
        while True:
            if proc.poll() is not None:
                self.state_path.unlink(missing_ok=True)
                raise BrokerStartError(
                    f"prometheus exited with code {proc.returncode} at start\n"
                    f"{log_tail([self.log_path])}"
                )
            try:
                if requests.get(f"{url}/-/ready", timeout=1.0).status_code == 200:
                    return url
            except requests.RequestException:
                pass
            if time.monotonic() >= deadline:
                self.stop()
                raise BrokerStartError(
                    f"prometheus not ready on {url} within {timeout:.0f} s\n"
                    f"{log_tail([self.log_path])}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0, *, keep_data: bool = False) -> bool:
        """SIGTERM the recorded process (SIGKILL after `timeout` s); whether one was running."""
        state = self._state()
        if state is None:
            return False
        ref = ProcessRef.from_json(state["process"])
        was_running = signal_process(ref, signal.SIGTERM)
        if was_running:
            for survivor in wait_gone([ref], timeout):
                signal_process(survivor, signal.SIGKILL)
            if wait_gone([ref], 5.0):
                raise BackendError(f"prometheus PID {ref.pid} survived SIGKILL")
        self.state_path.unlink(missing_ok=True)
        if not keep_data:
            shutil.rmtree(self.base / "data", ignore_errors=True)
        return was_running

    def reload(self) -> None:
        """Re-read the config (SIGHUP)."""
        state = self._state()
        if state is not None:
            signal_process(ProcessRef.from_json(state["process"]), signal.SIGHUP)

    def write_config(self, brokers: Sequence[BrokerEndpoint] = ()) -> Path:
        """Generate ``prometheus.yml``: the mqbed file-SD job and RabbitMQ plugin targets."""
        interval = f"{max(100, round(self.scrape_interval * 1000))}ms"  # Prometheus: integers
        rabbits = []
        for ep in brokers:
            facts = KINDS.get(ep.kind)
            if facts is not None and facts.prometheus_plugin and ep.prometheus_url:
                rabbits.append((ep.name, urlsplit(ep.prometheus_url).netloc))
        lines = [
            "# generated by mqbed (testbed/observe/prometheus.py); rewritten on every start",
            "global:",
            f"  scrape_interval: {interval}",
            f"  evaluation_interval: {interval}",
            "scrape_configs:",
            "  - job_name: mqbed",
            "    file_sd_configs:",
            f"      - files: [{json.dumps(str(self.sd_dir / '*.json'))}]",
            "        refresh_interval: 1s",
        ]
        for path, job in (("/metrics", "rabbitmq"), ("/metrics/per-object", "rabbitmq-queues")):
            if not rabbits:
                break
            lines += [f"  - job_name: {job}", f"    metrics_path: {path}", "    static_configs:"]
            for name, netloc in rabbits:
                lines += [
                    f"      - targets: {_yaml_list([netloc])}",
                    f"        labels: {{node: {name}}}",
                ]
        self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def _state(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return None
        return data

    # ----------------------------------------------------------------- queries

    def query(self, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
        return query(self.url, promql, timeout)


def query(url: str, promql: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Instant query against Prometheus at `url`; the ``data.result`` list.

    Raises `BackendError` on an HTTP or PromQL error (the message names the query).
    """
    try:
        resp = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=timeout)
        body = resp.json()
    except (requests.RequestException, ValueError) as exc:
        raise BackendError(f"prometheus query {promql!r} at {url} failed: {exc}") from exc
    if body.get("status") != "success":
        raise BackendError(f"prometheus query {promql!r}: {body.get('error', body)}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def wait_for_series(
    url: str,
    promql: str,
    *,
    timeout: float = 30.0,
    accept: Callable[[list[dict[str, Any]]], bool] = bool,
) -> list[dict[str, Any]]:
    """Poll `promql` until `accept(result)` (default: non-empty) or `timeout` s pass.

    Returns the last result either way (callers assert on it).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = query(url, promql)
        if accept(result) or time.monotonic() >= deadline:
            return result
        time.sleep(0.5)
