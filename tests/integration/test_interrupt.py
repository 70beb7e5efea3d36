"""An interrupted `mqbed run` leaves no process behind and a readable run directory.

`mqbed run` (the CLI in a child process) is stopped by SIGKILL, SIGTERM, SIGINT or SIGHUP at a
random moment (seeded) of its load phase, once with a broker of its own and once with the
brokers of `mqbed up`. Its whole process tree is taken with psutil just before the signal; once
`mqbed run` has exited (a clean stop takes a few seconds: Locust gets 6 s, the run's own broker
its graceful stop), none of those processes may remain after 10 s. The signals give the
documented exit codes (130, 143, 129) after a clean stop; a SIGKILLed run leaves its home under
``<home>/runs/`` for `mqbed down`, which removes it. The SIGKILL trials are each group's last:
`mqbed down` of the shared home also stops its broker.

Beyond the run's own tree, every process on the machine started during the trial is searched
for the trial's directories in its command line, working directory and environment (a process
that escaped the tree — a double fork, a re-parented broker — is found there). Every
interrupted run directory is reported by `mqbed report` (the run's table and report pages).
A SIGKILLed run loses the rows its workers had not flushed yet: with the broker of `mqbed up`
(a run's own broker gets the parent-death signal and goes down with the run), the messages the
broker took (a fan-out copy of each waits in a queue no one reads) are compared with the
confirmed rows left on disk; the loss must stay within one batch per worker plus in-flight
confirms. With default recording (batch_rows 5,000) the bound is in seconds: a kill after a
burst, once its flush_interval has passed, loses none of its rows (the flush timer's work).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
import requests
from typer.testing import CliRunner

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.backends.run_homes import reap_run_homes
from testbed.cli import app
from testbed.observe.ledger import collect_side
from tests.integration.conftest import start_or_fail

pytestmark = pytest.mark.integration

SCENARIO = """\
name: interrupt
duration: 90s
warmup: 1s
overload: true  # the tally queue has no consumer
topology:  # the fan-out keeps a copy of every message the broker takes in 'tally'
  exchanges: [{name: ix, type: fanout}]
  queues: [{name: iq, bindings: [{exchange: ix}]}, {name: tally, bindings: [{exchange: ix}]}]
producers: [{name: p, count: 2, exchange: ix, arrival: {kind: poisson, rate: 100/s}, confirms: true}]
consumers: [{name: c, queue: iq, count: 2}]
recording: {batch_rows: 50}  # parts on disk within a second: what a SIGKILL leaves
"""
BATCH_ROWS, WORKERS, IN_FLIGHT = 50, 2, 20
"""A SIGKILL loses at most one unflushed batch of rows per Locust worker, plus the publishes
the broker took whose confirm had not reached the client (at 200 msg/s and a confirm within a
few milliseconds a handful; 20 leaves room for a slow one)."""

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGKILL: -9}
RNG = random.Random(20261124)
TRIALS = [  # (does the run own its broker, signal): every signal with each kind of broker
    (True, signal.SIGINT),
    (True, signal.SIGTERM),
    (True, signal.SIGHUP),
    (True, signal.SIGKILL),
    (False, signal.SIGINT),
    (False, signal.SIGTERM),
    (False, signal.SIGHUP),
    (False, signal.SIGKILL),
]
DELAYS = [round(RNG.uniform(0.5, 4.0), 2) for _ in TRIALS]
"""Seconds after the load phase starts at which each trial's signal is sent."""


@pytest.fixture(scope="module")
def up_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBackend]:
    """A home with a `mqbed up` (detached) RabbitMQ; `down` at the end."""
    backend = LocalBackend(tmp_path_factory.mktemp("up-home"))
    try:
        yield backend
    finally:
        backend.down()


def cli(*args: str, cwd: Path, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "testbed.cli", *args], cwd=cwd, **kw)  # type: ignore[call-overload, no-any-return]


def wait_for_load(run: subprocess.Popen[bytes], runs: Path, timeout: float) -> float:
    """The wall-clock time the load phase starts (t0 + warm-up, from the worker config)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, "mqbed run ended before its load phase"
        configs = list(runs.glob("*/worker-config.r0.json"))
        if configs:
            return int(json.loads(configs[0].read_text())["t0_ns"]) / 1e9 + 1.0
        time.sleep(0.2)
    raise AssertionError(f"no worker configuration within {timeout} s")


def wait_for_part(run: subprocess.Popen[bytes], runs: Path, timeout: float) -> None:
    """Until a Locust worker has flushed its first messages part (each flushes every
    ``recording.flush_interval``, 1 s; a busy machine may start the first one late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, "mqbed run ended before it flushed a part"
        if list(runs.glob("*/measured/messages.parts/*.parquet")):
            return
        time.sleep(0.1)
    raise AssertionError(f"no messages part flushed within {timeout} s")


@contextmanager
def reaped(run: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """`run` (an `mqbed run` child), killed and waited for on the way out if it still runs:
    a wait above it failed, and the trial must not leave it behind."""
    try:
        yield run
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)


def assert_gone(tree: list[psutil.Process], exited: float, what: str) -> None:
    """Every process of `tree` ends within 10 s of `exited` (time.monotonic())."""
    while alive(tree) and time.monotonic() - exited < 10:
        time.sleep(0.1)
    assert alive(tree) == [], what


def alive(procs: list[psutil.Process]) -> list[str]:
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            pass
    return left


def strays(markers: list[str], since: float) -> list[str]:
    """Every process on the machine started since ``since`` (epoch seconds) whose command line,
    working directory or environment names one of ``markers`` (the trial's directories)."""
    found = []
    for p in psutil.process_iter(["pid", "create_time", "status"]):
        if p.pid == os.getpid() or p.info["create_time"] < since - 1:
            continue
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            seen = [" ".join(p.cmdline()), p.cwd(), *p.environ().values()]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if any(m in text for m in markers for text in seen):
            found.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
    return found


def rabbitmq_of(home: Path) -> BrokerEndpoint:
    """The RabbitMQ `mqbed up` started in ``home`` (local processes or docker containers)."""
    from testbed.backends.docker import DockerBackend

    local = LocalBackend(home).endpoints()
    found = local or DockerBackend(home).endpoints()
    return next(ep for ep in found if ep.kind == "rabbitmq")


def tally(home: Path) -> int:
    """The depth of the 'tally' queue on the RabbitMQ of `mqbed up` in ``home``: every message
    the broker took in this trial (the run purges its queues when it starts), once the
    management statistics (collected every second here) have stopped moving."""
    ep = rabbitmq_of(home)
    url = f"{(ep.management_url or '').rstrip('/')}/api/queues/%2F/tally"
    last, deadline = -1, time.monotonic() + 30
    while time.monotonic() < deadline:
        r = requests.get(url, auth=(ep.username, ep.password), timeout=5)
        r.raise_for_status()
        depth = int(r.json().get("messages", -1))
        if depth >= 0 and depth == last:  # (no figure yet on a queue just declared)
            return depth
        last = depth
        time.sleep(2.5)
    raise AssertionError("the tally queue's depth still moved after 30 s")


def wait_for_depth(home: Path, queue: str, depth: int, timeout: float) -> None:
    """Until ``queue`` on the RabbitMQ of `mqbed up` in ``home`` holds ``depth`` messages."""
    ep = rabbitmq_of(home)
    url = f"{(ep.management_url or '').rstrip('/')}/api/queues/%2F/{queue}"
    deadline, seen = time.monotonic() + timeout, -1
    while time.monotonic() < deadline:
        r = requests.get(url, auth=(ep.username, ep.password), timeout=5)
        seen = int(r.json().get("messages", -1)) if r.ok else -1
        if seen >= depth:
            return
        time.sleep(0.2)
    raise AssertionError(f"{queue} held {seen} messages after {timeout} s, not {depth}")


def confirmed_rows(run_dir: Path) -> int:
    """Confirmed publishes among the rows a run left (its merged table, else its parts)."""
    merged = run_dir / "measured" / "messages.parquet"
    files = [merged] if merged.exists() else sorted(run_dir.glob("measured/messages.parts/*"))
    ids: set[str] = set()
    for f in files:
        table = pq.read_table(f, columns=["msg_id", "t_confirm"]).to_pydict()
        ids.update(m for m, t in zip(table["msg_id"], table["t_confirm"], strict=True) if t)
    return len(ids)


FLUSH_SCENARIO = """\
name: flushkill
duration: 90s
warmup: 1s
overload: true
topology:
  exchanges: [{name: ix, type: fanout}]
  queues: [{name: iq, bindings: [{exchange: ix}]}, {name: tally, bindings: [{exchange: ix}]}]
producers:
  - name: p
    exchange: ix
    confirms: true
    arrival: {kind: steps, process: constant, steps: [{at: 0s, rate: 20/s}, {at: 3s, rate: 0.02/s}]}
consumers: [{name: c, queue: iq}]
"""
FLUSH_RATE, FLUSH_SENT, FLUSH_INTERVAL, FLUSH_QUIET, FLUSH_IN_FLIGHT = 20.0, 60, 1.0, 2.5, 2
"""Default recording (batch_rows 5000, flush_interval 1 s): 60 sends in 3 s, then silence (the
next send would be 50 s later: the producer stays, so its on_stop flush does not run); the kill
comes FLUSH_QUIET s into the silence, when no send falls in the bound's last 1.5 s. An appended
row flushes its table on age too, so under steady load the bound holds without the timer; only
the timer flushes a burst's last rows (without it 16 of 60 waited for a row that never came)."""


def test_sigkill_loses_at_most_flush_interval_seconds_of_rows(
    tmp_path: Path, up_home: LocalBackend
) -> None:
    """The loss bound in seconds (README): rows lost <= rate x (flush_interval + 0.5 s) of the
    sends before the kill, plus in-flight confirms; with default batch_rows the flush timer is
    what keeps it (batches of 5,000 rows never fill at 20 msg/s)."""
    if not any(up_home.is_healthy(ep.name) for ep in up_home.endpoints()):
        start_or_fail(up_home, ["rabbitmq"], label="mqbed up", detach=True)
    home, runs = up_home.home, tmp_path / "runs"
    (tmp_path / "s.yaml").write_text(FLUSH_SCENARIO)
    run = cli("run", "s.yaml", "--no-predict", "--no-report", "--workers", "1", "--home",
              str(home), "--out", str(runs), cwd=tmp_path, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT)  # fmt: skip
    with reaped(run):
        wait_for_load(run, runs, 150)
        wait_for_depth(home, "tally", FLUSH_SENT, 60)  # the whole burst is in: silence now
        time.sleep(FLUSH_QUIET)
        run.send_signal(signal.SIGKILL)
        output, _ = run.communicate(timeout=60)
    (run_dir,) = runs.iterdir()
    try:
        took, kept = tally(home), confirmed_rows(run_dir)
    finally:
        assert reap_run_homes(home) == [run_dir.name]  # the broker stays for the next trials
    window = max(0.0, FLUSH_INTERVAL + 0.5 - FLUSH_QUIET)  # sends in the last 1.5 s: none
    print(f"\nSIGKILL {FLUSH_QUIET} s after the last send: took {took}, kept {kept}")
    assert took == FLUSH_SENT, output.decode(errors="replace")[-3000:]
    assert 0 <= took - kept <= FLUSH_RATE * window + FLUSH_IN_FLIGHT, (took, kept)


@pytest.mark.parametrize(("own", "sig", "delay"), [(*t, d) for t, d in zip(TRIALS, DELAYS, strict=True)],
                         ids=[f"{'own' if o else 'up'}-{s.name}" for o, s in TRIALS])  # fmt: skip
@pytest.mark.usefixtures("spark")
def test_interrupted_run_leaves_nothing(
    tmp_path: Path, up_home: LocalBackend, own: bool, sig: signal.Signals, delay: float
) -> None:
    if own:
        home = tmp_path / "home"
    else:
        home = up_home.home
        if not any(up_home.is_healthy(ep.name) for ep in up_home.endpoints()):
            start_or_fail(up_home, ["rabbitmq"], label="mqbed up", detach=True)
    interrupted_trial(tmp_path, home, own, sig, delay, backend="local")


def interrupted_trial(
    tmp_path: Path, home: Path, own: bool, sig: signal.Signals, delay: float, backend: str
) -> None:
    """One trial of the matrix (module docstring) on `backend`, with the brokers of `mqbed up`
    in `home` unless `own`; the SIGKILL trial of `mqbed up` brokers downs their home."""
    (tmp_path / "s.yaml").write_text(SCENARIO)
    runs = tmp_path / "runs"
    started = time.time()
    run = cli("run", "s.yaml", "--backend", backend, "--no-predict", "--no-report", "--workers",
              "2", "--home", str(home), "--out", str(runs), cwd=tmp_path, stdout=subprocess.PIPE,
              stderr=subprocess.STDOUT)  # fmt: skip
    with reaped(run):
        load_at = wait_for_load(run, runs, 150)
        # records to keep (SIGKILL: what was flushed must survive; else: merged): the first
        # flush, which a loaded machine can delay past t0 + 1 s (users spawned 3 s late)
        wait_for_part(run, runs, 30)
        time.sleep(max(0.0, load_at + delay - time.time()))
        tree = psutil.Process(run.pid).children(recursive=True)
        locusts = [p for p in tree if "locust" in " ".join(p.cmdline())]
        assert len(locusts) == 3, [p.cmdline() for p in tree]  # master + 2 workers
        run.send_signal(sig)
        output, _ = run.communicate(timeout=60)
        exited = time.monotonic()
    assert run.returncode == EXIT[sig], output.decode(errors="replace")
    assert_gone(tree, exited, "processes of the run survived it")
    (run_dir,) = runs.iterdir()
    env = json.loads((run_dir / "environment.json").read_text())
    assert env["interrupted"] is True
    parts = sorted((run_dir / "measured").glob("messages.parts/*.parquet"))
    if sig == signal.SIGKILL:  # the run home stays for `mqbed down`
        assert [p.name for p in (home / "runs").iterdir()] == [run_dir.name]
        assert parts and sum(pq.read_table(p).num_rows for p in parts) > 0
        ledger = collect_side(run_dir / "measured", 1)[0]  # what the run left can be merged
        assert ledger.sent > 0
    else:  # a clean stop: records merged, home removed
        assert (run_dir / "measured" / "ledger.json").exists()
        assert pq.read_table(run_dir / "measured" / "messages.parquet").num_rows > 0
        assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []
    assert not list(run_dir.rglob("worker-secrets*"))
    if sig == signal.SIGKILL and not own:  # (a run's own broker goes down with the run)
        took, kept = tally(home), confirmed_rows(run_dir)
        lost = took - kept  # a row is written at the confirm: the broker has every one of them
        print(f"\nSIGKILL: the broker took {took} messages, the run kept {kept} rows: {lost} lost")
        assert 0 <= lost <= WORKERS * BATCH_ROWS + IN_FLIGHT, (took, kept)
    report = CliRunner().invoke(app, ["report", str(run_dir)])  # the session's warm Spark
    assert report.exit_code == 0, report.output
    assert (run_dir / "analysis" / "summary.json").is_file()
    if own or sig == signal.SIGKILL:  # (`down` of the shared home also stops its broker)
        down = cli("down", "--home", str(home), cwd=tmp_path, stdout=subprocess.PIPE)
        assert down.wait(timeout=120) == 0
        assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []
    markers = [str(tmp_path), str(home / "runs")]
    assert strays(markers, started) == [], "processes of the trial outlived it"


REPORT_SCENARIO = """\
name: reportkill
duration: 3s
warmup: 1s
topology: {queues: [{name: rq}]}
producers: [{name: p, queue: rq, arrival: {kind: poisson, rate: 50/s}, confirms: true}]
consumers: [{name: c, queue: rq}]
"""


def test_sigkill_in_the_report_phase_takes_the_spark_jvm_down(tmp_path: Path) -> None:
    """`mqbed run` SIGKILLed while its report runs: the Spark JVM it started (found in its
    process tree before the kill, never by name) is gone 10 s later, and `mqbed down` leaves
    no run home."""
    home, runs = tmp_path / "home", tmp_path / "runs"
    (tmp_path / "s.yaml").write_text(REPORT_SCENARIO)
    started = time.time()
    run = cli("run", "s.yaml", "--no-predict", "--workers", "1", "--home", str(home), "--out",
              str(runs), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    with reaped(run):
        deadline = time.monotonic() + 150
        jvms: list[psutil.Process] = []
        tree: list[psutil.Process] = []
        while not jvms and time.monotonic() < deadline:
            assert run.poll() is None, "mqbed run ended before a JVM of its report was seen"
            tree = psutil.Process(run.pid).children(recursive=True)
            jvms = [p for p in tree if _is_java(p)]
            time.sleep(0.1)
        assert jvms, "no JVM in the run's process tree within 150 s"
        time.sleep(1.0)  # the report's job under way
        tree = psutil.Process(run.pid).children(recursive=True)
        run.send_signal(signal.SIGKILL)
        output, _ = run.communicate(timeout=60)
        exited = time.monotonic()
    assert run.returncode == -9, output.decode(errors="replace")[-3000:]
    assert_gone(tree, exited, "processes of the run (its Spark JVM) survived it")
    down = cli("down", "--home", str(home), cwd=tmp_path, stdout=subprocess.PIPE)
    assert down.wait(timeout=120) == 0
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []
    assert strays([str(tmp_path), str(home / "runs")], started) == []


def _is_java(p: psutil.Process) -> bool:
    """A Spark JVM (the report's; the broker here is RabbitMQ's beam, not Java)."""
    try:
        return Path(p.exe()).name == "java" and "spark" in " ".join(p.cmdline()).lower()
    except psutil.Error:
        return False
