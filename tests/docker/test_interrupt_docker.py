"""A SIGKILLed `mqbed run` on the docker backend leaves nothing behind once `mqbed down` ran
(issue 16, point 5): no container, no ``dockerd``, no run home.

The run must start its own ``dockerd`` (the case nothing used to record), so it gets an engine
root of its own (``$MQBED_DOCKER_ROOT``, no ``$DOCKER_HOST``) holding only the RabbitMQ image,
copied there from the session's engine (``docker save | docker load``, no rebuild). Its process
tree, its containers and their processes are taken just before a SIGKILL at a random (seeded)
moment of the load phase; then `mqbed down` of its home, bounded in time, and afterwards none
of those processes may remain, the home's ``runs/`` is empty, and the engine root, started
again by the test, holds no container.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from testbed.backends.docker_engine import HOME_LABEL, DockerEngine
from testbed.backends.run_engine import RUN_ENGINE, EngineUse
from tests.integration.test_interrupt import DELAYS, cli, interrupted_trial, reaped

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SCENARIO = """\
name: dockerkill
duration: 120s
warmup: 1s
broker: {kind: rabbitmq, backend: docker}
topology: {queues: [{name: kq}]}
producers: [{name: p, queue: kq, arrival: {kind: poisson, rate: 50/s}, confirms: true}]
consumers: [{name: c, queue: kq}]
"""
DELAY = round(random.Random(20261126).uniform(0.5, 4.0), 2)
"""Seconds into the load phase at which the run is killed."""


@pytest.fixture
def run_engine_root(docker_client: Any, broker_images: dict[str, str]) -> Iterator[Path]:
    """An engine root of the run's own, with the session's RabbitMQ image and no daemon
    running; whatever daemon is recorded there is stopped (by PID) and the root removed after."""
    root = Path(tempfile.mkdtemp(prefix="mqk", dir="/tmp"))  # short: unix socket paths
    engine = DockerEngine(root)
    try:
        engine.start(timeout=90.0)
        import docker

        client = docker.DockerClient(base_url=engine.host, timeout=300)
        try:
            client.images.load(docker_client.api.get_image(broker_images["rabbitmq"]))
            client.images.get(broker_images["rabbitmq"])
        finally:
            client.close()
        engine.stop()
        yield root
    finally:
        engine.stop()
        DockerEngine(root).stop(timeout=30.0, recorded=True)  # a daemon the run left, by PID
        _unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)


def _unmount_below(root: Path) -> None:
    """Unmount what the engines left mounted under `root` (dockerd bind-mounts its network
    namespace at ``exec/netns/default`` and leaves it), deepest first, so it can be removed."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", point], check=False, timeout=30, capture_output=True)


def _cli(env: dict[str, str], cwd: Path, *args: str, **kw: Any) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "testbed.cli", *args]
    return subprocess.Popen(argv, cwd=cwd, env=env, **kw)


def _wait_for_load(run: subprocess.Popen[bytes], runs: Path, timeout: float) -> float:
    """The wall-clock time the load phase starts, once a worker has flushed a part."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, "mqbed run ended before its load phase"
        configs = list(runs.glob("*/worker-config.r0.json"))
        if configs and list(runs.glob("*/measured/messages.parts/*.parquet")):
            return int(json.loads(configs[0].read_text())["t0_ns"]) / 1e9 + 1.0
        time.sleep(0.2)
    raise AssertionError(f"no load phase within {timeout} s")


def _left(procs: list[psutil.Process]) -> list[str]:
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            pass
    return alive


def _on_root(root: Path) -> list[psutil.Process]:
    """Processes whose command line names the engine root: dockerd, its containerd and the
    containers' shims (which outlive both by design)."""
    found = []
    for p in psutil.process_iter():
        try:
            if str(root) in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def _containers(host: str, home: Path | None = None) -> list[Any]:
    """Containers on the engine at `host` (those labelled with `home` only, when given)."""
    import docker

    where = {"filters": {"label": f"{HOME_LABEL}={home}"}} if home else {}
    client = docker.DockerClient(base_url=host, timeout=60)
    try:
        return list(client.containers.list(all=True, **where))
    finally:
        client.close()


def test_sigkilled_docker_run_leaves_nothing_after_down(
    run_engine_root: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "MQBED_DOCKER_ROOT": str(run_engine_root), "PYTHONPATH": str(REPO)}
    env.pop("DOCKER_HOST", None)  # the run starts its own dockerd on that root
    env.pop("MQBED_BACKEND", None)
    home, runs = tmp_path / "home", tmp_path / "runs"
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = _cli(env, tmp_path, "run", "s.yaml", "--backend", "docker", "--no-predict",
               "--no-report", "--workers", "1", "--home", str(home), "--out", str(runs),
               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    with reaped(run):
        load_at = _wait_for_load(run, runs, 240)
        time.sleep(max(0.0, load_at + DELAY - time.time()))
        (run_home,) = (home / "runs").iterdir()
        use = EngineUse.load(run_home / RUN_ENGINE)
        assert use is not None and use.started is not None, "the run started no dockerd"
        assert use.root == str(run_engine_root)
        containers = _containers(use.host, run_home.resolve())
        assert len(containers) == 1, [c.name for c in containers]
        inits = [psutil.Process(int(c.attrs["State"]["Pid"])) for c in containers]
        inits += [child for p in inits for child in p.children(recursive=True)]  # the broker
        tree = psutil.Process(run.pid).children(recursive=True)  # dockerd, containerd, Locust
        assert use.started.pid in {p.pid for p in tree}
        tree += [*inits, *_on_root(run_engine_root)]
        run.send_signal(signal.SIGKILL)
        output, _ = run.communicate(timeout=30)
    assert run.returncode == -9, output.decode(errors="replace")[-3000:]
    assert run_home.exists()  # nothing cleaned up after a SIGKILL: `down` must find it all
    t0 = time.monotonic()
    down = _cli(env, tmp_path, "down", "--home", str(home), "--json", stdout=subprocess.PIPE)
    out, _ = down.communicate(timeout=120)
    assert down.returncode == 0, out
    assert f"{run_home.name} (killed run)" in json.loads(out)["stopped"], out
    left = _left(tree)
    while left and time.monotonic() - t0 < 60:
        time.sleep(0.2)
        left = _left(tree)
    assert left == [], "processes of the killed run survived `mqbed down`"
    assert _left(_on_root(run_engine_root)) == []
    assert list((home / "runs").iterdir()) == []
    engine = DockerEngine(run_engine_root)  # not running: `down` stopped the run's dockerd
    assert not engine.running()
    try:
        engine.start(timeout=90.0)
        assert _containers(engine.host) == []  # the run's container removed, not just stopped
    finally:
        engine.stop()


MATRIX = [  # the local module's matrix on the docker backend (own SIGKILL: the test above)
    *[(True, s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
    *[(False, s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL)],
]


@pytest.fixture(scope="module")
def docker_up_home(
    docker_engine: DockerEngine, broker_images: dict[str, str], tmp_path_factory: Any
) -> Iterator[Path]:
    """A home with `mqbed up --backend docker` RabbitMQ, started once for the module (on the
    session's engine, $DOCKER_HOST); `mqbed down` at the end (the SIGKILL trial downs it)."""
    home = tmp_path_factory.mktemp("docker-up-home")
    up = cli("up", "--backend", "docker", "--broker", "rabbitmq", "--home", str(home),
             cwd=home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    out, _ = up.communicate(timeout=180)
    assert up.returncode == 0, out.decode(errors="replace")[-3000:]
    try:
        yield home
    finally:
        down = cli("down", "--home", str(home), cwd=home, stdout=subprocess.PIPE)
        down.communicate(timeout=120)


@pytest.mark.parametrize(("own", "sig", "delay"), [(*t, d) for t, d in zip(MATRIX, DELAYS, strict=False)],
                         ids=[f"{'own' if o else 'up'}-{s.name}" for o, s in MATRIX])  # fmt: skip
@pytest.mark.usefixtures("spark", "docker_engine", "broker_images")
def test_interrupted_docker_run_leaves_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, own: bool, sig: signal.Signals, delay: float
) -> None:
    """The local matrix's checks (tests/integration/test_interrupt.py) with docker brokers:
    no process of the run 10 s after it exits, no run home after `mqbed down`, `mqbed report`
    opens the run directory, and the SIGKILL of an `mqbed up` run loses rows within the bound."""
    home = tmp_path / "home" if own else request.getfixturevalue("docker_up_home")
    interrupted_trial(tmp_path, home, own, sig, delay, backend="docker")
    if own:  # the run's container went with it
        mine = str(home.resolve())
        on_engine = _containers(os.environ["DOCKER_HOST"])
        assert [c.name for c in on_engine if c.labels.get(HOME_LABEL, "").startswith(mine)] == []
