"""No broker password under a run directory, in its report or in mqbed's output.

Two short `mqbed run`s (the CLI in a child process, like a user): one against the session's
`mqbed up` broker, one against the same broker through the external backend with the
credentials in the scenario's URL, served by an external Locust worker that takes them from its
own ``$MQBED_BROKER_URLS`` (compose's path). Both runs pass ``--no-report``; one
``mqbed report`` then builds both reports in one Spark JVM (building the up-broker run's report
inside its `mqbed run` added 66 s, measured). Every byte of every file under each run directory
is searched for the password, its report (``report.html``, ``summary.md``, ``analysis/``)
included, and so is every log under the testbed homes (the brokers' logs, ``epmd.log``, a run
home's logs); the Locust processes' credentials file must be mode 0600, outside the run
directory, and gone when the run ends. (Assertions are written so that a failure lists
file names, never the password.)
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("secrets")]  # one up_run

SCENARIO = """\
name: secrets
duration: 8s
drain_timeout: 15s
broker:
  kind: rabbitmq
{urls}
topology: {{queues: [{{name: sq}}]}}
producers: [{{name: p, count: 2, queue: sq, arrival: {{kind: poisson, rate: 50/s}}, confirms: true}}]
consumers: [{{name: c, queue: sq, count: 2}}]
"""


def mqbed(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )


def watch_run(proc: subprocess.Popen[bytes], home: Path, timeout: float) -> tuple[bytes, set[int]]:
    """Wait for `proc` (≤ `timeout` s) while noting the modes of the Locust credentials files
    in the run homes; returns its output and the modes seen."""
    modes: set[int] = set()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for f in (home / "runs").glob("*/worker-secrets.r*.json"):
            try:
                modes.add(stat.S_IMODE(f.stat().st_mode))
            except FileNotFoundError:
                pass
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    output, _ = proc.communicate(timeout=30)
    return output, modes


def files_holding(root: Path, secret: bytes) -> list[str]:
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
            if p.is_file() and secret in p.read_bytes()]  # fmt: skip


def home_logs(home: Path) -> list[Path]:
    """The log files under a testbed home: ``*.log*`` and whatever is in a ``log`` directory."""
    return [p for p in sorted(home.rglob("*")) if p.is_file()
            and (".log" in p.name or "log" in p.relative_to(home).parts[:-1])]  # fmt: skip


def logs_holding(homes: list[Path], secret: bytes) -> list[str]:
    return [str(p) for home in homes for p in home_logs(home) if secret in p.read_bytes()]


@dataclass
class UpRun:
    run_dir: Path
    output: bytes
    modes: set[int]


@pytest.fixture(scope="module")
def up_run(
    tmp_path_factory: pytest.TempPathFactory, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> UpRun:
    """The run on the session's `mqbed up` broker; its report is built with the external
    run's (`test_external_urls_are_redacted_everywhere`)."""
    cwd = tmp_path_factory.mktemp("secrets-up")
    (cwd / "s.yaml").write_text(SCENARIO.format(urls=""))
    home, runs = local_backend.home, cwd / "runs"
    proc = mqbed("run", "s.yaml", "--no-predict", "--no-report", "--workers", "2",
                 "--home", str(home), "--out", str(runs), cwd=cwd)  # fmt: skip
    output, modes = watch_run(proc, home, 300)
    assert proc.returncode == 0, output.decode(errors="replace")
    (run_dir,) = runs.iterdir()
    return UpRun(run_dir, output, modes)


def test_run_on_up_brokers_keeps_the_password_out(
    up_run: UpRun, local_backend: LocalBackend, rabbitmq: BrokerEndpoint
) -> None:
    home, run_dir, output, modes = local_backend.home, up_run.run_dir, up_run.output, up_run.modes
    secret = rabbitmq.password.encode()
    assert files_holding(run_dir, secret) == []
    assert any(p.name.endswith(".log") for p in home_logs(home))  # the broker's own log
    assert logs_holding([home], secret) == []
    config = json.loads((run_dir / "worker-config.r0.json").read_text())["endpoint"]
    assert (config["username"], config["password"]) == (rabbitmq.username, "***")
    leaked = secret in output  # (a boolean: a failure must not print the password)
    assert not leaked
    assert modes == {0o600}  # the Locust processes' credentials file existed, private
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []  # removed


def test_external_urls_are_redacted_everywhere(
    tmp_path: Path, local_backend: LocalBackend, rabbitmq: BrokerEndpoint, up_run: UpRun
) -> None:
    url = f"amqp://{rabbitmq.username}:{rabbitmq.password}@127.0.0.1:{rabbitmq.port}/"
    urls = f"  backend: external\n  urls: ['{url}', '{rabbitmq.management_url}']"
    (tmp_path / "s.yaml").write_text(SCENARIO.format(urls=urls))
    home, runs = tmp_path / "home", tmp_path / "runs"
    rendezvous = runs / ".locust" / "current.json"
    worker_env = {**os.environ, "MQBED_BROKER_URLS": url}  # as compose gives it
    service = subprocess.Popen(
        [sys.executable, "-m", "testbed.workload.worker_service", "--rendezvous",
         str(rendezvous), "--once", "--max-idle", "180"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=worker_env,
        start_new_session=True,
    )  # fmt: skip
    try:
        proc = mqbed("run", "s.yaml", "--no-predict", "--no-report", "--external-workers", "1",
                     "--home", str(home), "--out", str(runs), cwd=tmp_path)  # fmt: skip
        output, modes = watch_run(proc, home, 300)
        served = service.communicate(timeout=60)[0]
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait(timeout=10)
    assert proc.returncode == 0, output.decode(errors="replace")
    assert b"worker 1 for" in served, served
    run_dir = next(p for p in runs.iterdir() if not p.name.startswith("."))
    assert (run_dir / "measured" / "locust" / "r0-worker1.log").exists()
    report = mqbed("report", str(run_dir), str(up_run.run_dir), cwd=tmp_path)  # both runs
    report_output, _ = report.communicate(timeout=900)
    assert report.returncode == 0, report_output.decode(errors="replace")
    for reported in (run_dir, up_run.run_dir):
        assert (reported / "report.html").exists() and (reported / "summary.md").exists()
    redacted = f"amqp://{rabbitmq.username}:***@127.0.0.1:{rabbitmq.port}/"
    shown = [redacted in (run_dir / f).read_text() for f in ("scenario.yaml", "report.html")]
    assert shown == [True, True]  # the URL is still there, its password masked
    secret = rabbitmq.password.encode()
    assert files_holding(run_dir, secret) == []
    assert files_holding(runs, secret) == []  # the rendezvous directory included
    assert files_holding(up_run.run_dir, secret) == []  # the up-broker run, now reported
    assert logs_holding([home, local_backend.home], secret) == []  # the run's, the broker's
    leaked = secret in output + report_output + served
    assert not leaked
    assert modes == {0o600}
    assert list((home / "runs").iterdir()) == []
