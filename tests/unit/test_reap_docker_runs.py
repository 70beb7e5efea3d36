"""Issue 16 point 5 on the docker backend: what a SIGKILLed docker-backend run leaves (its run
home, its containers, the private ``dockerd`` it started) is found and removed by `mqbed down`
and by the next run (`reap_run_homes`), and nothing of a live run, nor an engine the run did
not start, is ever touched.

No real engine here: the "dockerd" is a process whose command line names its engine root, as
dockerd's does; `DockerBackend.down` (removing the containers through the engine's API) is
recorded instead of run, except where a fake Docker API answers on the engine's socket. The live
counterpart is tests/docker/test_interrupt_docker.py."""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import docker.errors
import pytest

import testbed.backends.docker_engine as docker_engine
import testbed.backends.run_homes as run_homes
import testbed.backends.state as state_files
from testbed.backends.docker import DockerBackend
from testbed.backends.procs import ProcessRef, is_alive
from testbed.backends.run_engine import RUN_ENGINE, EngineUse, engine_for_run
from testbed.backends.run_homes import reap_before_run, reap_run_homes
from testbed.backends.state import RUN_RECORD, NodeRecord, RunRecord
from testbed.exceptions import BackendError, MqbedError


@pytest.fixture
def root() -> Iterator[Path]:
    """An engine root short enough for a unix socket path."""
    path = Path(tempfile.mkdtemp(prefix="mqr", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def engines(root: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Stand-ins for ``dockerd`` processes (killed at the end if still running)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(5)


STAND_IN = """\
import pathlib, signal, sys, time
def term(*_):
    pathlib.Path(sys.argv[1]).write_text("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
pathlib.Path(sys.argv[1] + ".ready").touch()
time.sleep(60)
"""


def _dockerd(engines: list[subprocess.Popen[bytes]], root: Path) -> ProcessRef:
    """A process whose command line names `root` like ``dockerd --data-root ROOT/data``, the
    leader of its own session (as `DockerEngine.start` runs it)."""
    argv = [sys.executable, "-c", STAND_IN, str(root / f"term.{len(engines)}"), "--data-root",
            f"{root}/data"]  # fmt: skip
    proc = subprocess.Popen(argv, start_new_session=True)
    engines.append(proc)
    ready = Path(f"{argv[3]}.ready")
    deadline = time.monotonic() + 20
    while not ready.exists():  # its SIGTERM handler is in place
        assert time.monotonic() < deadline and proc.poll() is None, "stand-in did not start"
        time.sleep(0.01)
    return ProcessRef.of(proc.pid, str(root))


def _dead() -> ProcessRef:
    """The identity of a process that has exited (a SIGKILLed `mqbed run`)."""
    p = subprocess.Popen(["true"])
    ref = ProcessRef.of(p.pid, "")
    p.wait(5)
    return ref


def _me() -> ProcessRef:
    return ProcessRef.of(os.getpid(), "")


def _run_home(
    home: Path, name: str, owner: ProcessRef, *, started: ProcessRef | None, root: Path
) -> Path:
    """A docker run's home as `mqbed run` leaves it: run.json, run-engine.json, state file."""
    run_dir = home / "runs" / name
    run_dir.mkdir(parents=True)
    RunRecord(name, owner).save(run_dir / RUN_RECORD)
    host = f"unix://{root}/docker.sock"
    EngineUse(host, owner, str(root), started).save(run_dir / RUN_ENGINE)
    rec = NodeRecord("rabbitmq0", "rabbitmq", str(run_dir / "rabbitmq0"), {}, "u", "p", False)
    rec.params["docker_host"] = host
    rec.owner_pid = owner.pid
    state_files.TestbedState("t", str(run_dir), [rec]).save(run_dir / "docker-state.json")
    return run_dir


@pytest.fixture
def downs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, str | None]]:
    """(home, engine) of every `DockerBackend.down` (the containers' removal), not run."""
    calls: list[tuple[Path, str | None]] = []

    def down(self: DockerBackend, timeout: float = 30.0, *, keep_data: bool = False) -> list[str]:
        calls.append((self.home, self.docker_host))
        return []

    monkeypatch.setattr(DockerBackend, "down", down)
    return calls


def test_killed_docker_run_loses_containers_engine_and_home(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any]
) -> None:
    engine = _dockerd(engines, root)
    run_dir = _run_home(tmp_path, "killed", _dead(), started=engine, root=root)
    assert reap_run_homes(tmp_path) == ["killed"]
    assert downs == [(run_dir.resolve(), f"unix://{root}/docker.sock")]  # containers first
    assert not is_alive(engine)
    assert (root / "term.0").read_text() == "SIGTERM"  # dockerd's graceful stop, by its PID
    assert not run_dir.exists()


def test_a_live_docker_run_is_left_alone(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any]
) -> None:
    run_dir = _run_home(tmp_path, "on", _me(), started=_dockerd(engines, root), root=root)
    assert reap_run_homes(tmp_path) == []
    assert downs == [] and engines[0].poll() is None
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "docker-state.json",
        RUN_ENGINE,
        RUN_RECORD,
    ]


def test_an_engine_the_run_did_not_start_keeps_running(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any]
) -> None:
    """The run reused a dockerd (or `$DOCKER_HOST`): its containers go, the engine stays."""
    bystander = _dockerd(engines, root)
    run_dir = _run_home(tmp_path, "killed", _dead(), started=None, root=root)
    assert reap_run_homes(tmp_path) == ["killed"]
    assert [home for home, _ in downs] == [run_dir.resolve()]
    assert is_alive(bystander)


def test_a_recycled_engine_pid_is_never_signalled(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any]
) -> None:
    """The recorded dockerd's PID now runs another process (another start time), or a process
    whose command line does not name the engine root: neither is signalled."""
    other = _dockerd(engines, root)
    recycled = ProcessRef(other.pid, other.pgid, other.start_ticks - 1, other.marker)
    _run_home(tmp_path, "a", _dead(), started=recycled, root=root)
    foreign = ProcessRef(other.pid, other.pgid, other.start_ticks, "/some/other/root")
    _run_home(tmp_path, "b", _dead(), started=foreign, root=root)
    assert reap_run_homes(tmp_path) == ["a", "b"]
    assert is_alive(other)


def test_an_engine_a_live_run_records_keeps_running(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any]
) -> None:
    """The killed run started the engine; another run of this home, still on, reused it."""
    engine = _dockerd(engines, root)
    _run_home(tmp_path, "killed", _dead(), started=engine, root=root)
    _run_home(tmp_path, "on", _me(), started=None, root=root)
    assert reap_run_homes(tmp_path) == ["killed"]
    assert is_alive(engine)


def test_containers_fail_to_go_the_home_and_engine_stay(
    tmp_path: Path, root: Path, engines: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(self: DockerBackend, timeout: float = 30.0, *, keep_data: bool = False) -> None:
        raise docker.errors.APIError("removal of container failed")

    monkeypatch.setattr(DockerBackend, "down", down)
    engine = _dockerd(engines, root)
    run_dir = _run_home(tmp_path, "killed", _dead(), started=engine, root=root)
    with pytest.raises(BackendError, match="could not remove its containers"):
        reap_run_homes(tmp_path)
    assert run_dir.exists() and is_alive(engine)  # `mqbed down` can retry


@pytest.mark.parametrize(
    "source", ["run-engine.json", "docker-state.json", "docker-state.json of a live owner"]
)
def test_the_owner_is_told_without_run_json(
    tmp_path: Path, root: Path, downs: list[Any], source: str
) -> None:
    """A home killed before (or after) its run.json existed: the engine record or the state
    file's owner PIDs say whose it is; nothing naming an owner, it stays."""
    alive = "live" in source
    run_dir = _run_home(tmp_path, "r", _me() if alive else _dead(), started=None, root=root)
    (run_dir / RUN_RECORD).unlink()
    if source != RUN_ENGINE:
        (run_dir / RUN_ENGINE).unlink()
    (tmp_path / "runs" / "nameless").mkdir()
    assert reap_run_homes(tmp_path) == ([] if alive else ["r"])
    assert (tmp_path / "runs" / "nameless").is_dir()


class _Api(BaseHTTPRequestHandler):
    """Just enough of the Docker Engine API for `docker.DockerClient.containers.list()`."""

    labels: dict[str, str] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0]
        if path == "/_ping":
            self._reply("OK")
        elif path == "/version":
            self._reply({"ApiVersion": "1.41", "Version": "24.0.0"})
        elif path.endswith("/containers/json"):
            self._reply([{"Id": "c0"}])
        elif path.endswith("/containers/c0/json"):
            state = {"Status": "running", "Running": True}
            self._reply(
                {"Id": "c0", "Name": "/c0", "Config": {"Labels": self.labels}, "State": state}
            )
        else:
            self.send_error(404)

    def _reply(self, body: object) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.mark.parametrize("whose", ["the killed run's", "another home's", "not mqbed's"])
def test_an_engine_running_other_containers_keeps_running(
    tmp_path: Path, root: Path, engines: list[Any], downs: list[Any], whose: str
) -> None:
    engine = _dockerd(engines, root)
    run_dir = _run_home(tmp_path, "killed", _dead(), started=engine, root=root)
    label = {"the killed run's": str(run_dir.resolve()), "another home's": "/elsewhere"}
    labels = {docker_engine.HOME_LABEL: label[whose]} if whose in label else {}

    class Api(_Api):
        pass

    Api.labels = labels
    server = _UnixServer(str(root / "docker.sock"), Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert reap_run_homes(tmp_path) == ["killed"]
    finally:
        server.shutdown()
        server.server_close()
    assert is_alive(engine) == (whose != "the killed run's")


FAKE_DOCKERD = """\
import json, os, signal, socket, sys, time
args = sys.argv[1:]
path = args[args.index("-H") + 1].removeprefix("unix://")
record, deadline = os.environ["MQBED_TEST_RECORD"], time.monotonic() + 10
while True:  # answers only once the run's home names this very process
    try:
        if json.load(open(record))["started"]["pid"] == os.getpid():
            break
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.02)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
while True:
    conn, _ = server.accept()
    conn.recv(1024)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\nOK")
    conn.close()
"""


def test_a_started_engine_is_recorded_before_it_answers_and_forgotten_after(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`engine_for_run` writes the dockerd it launches into the run's home at once (the fake
    dockerd refuses to answer until it is named there), and removes the record once that
    daemon is stopped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dockerd").write_text(f"#!{sys.executable}\n{FAKE_DOCKERD}")
    (bin_dir / "dockerd").chmod(0o755)
    record = tmp_path / RUN_ENGINE
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("MQBED_TEST_RECORD", str(record))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr(docker_engine, "_SYSTEM_SOCKET", root / "no-system-daemon.sock")
    with engine_for_run(root, timeout=20.0, record=record) as host:
        use = EngineUse.load(record)
        assert use is not None and use.started is not None
        assert use.host == host == f"unix://{root}/docker.sock"
        assert use.root == str(root) and use.owner.pid == os.getpid()
        assert is_alive(use.started)  # its command line names the root
        assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert not record.exists()
    assert not is_alive(use.started)


def test_a_shared_engine_is_recorded_without_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///somewhere/docker.sock")
    record = tmp_path / RUN_ENGINE
    with engine_for_run(record=record) as host:
        use = EngineUse.load(record)
        assert use is not None and use.host == host == "unix:///somewhere/docker.sock"
        assert use.started is None and use.root is None
    assert not record.exists()


def test_the_next_run_reaps_and_only_says_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(run_homes, "reap_run_homes", lambda home: ["r1"])
    reap_before_run(tmp_path, said.append)

    def fails(home: Path) -> list[str]:
        raise MqbedError("rabbitmq0 did not stop")

    monkeypatch.setattr(run_homes, "reap_run_homes", fails)
    reap_before_run(tmp_path, said.append)
    assert said == [
        "cleaned up after killed run(s): r1",
        "could not clean up after a killed run (rabbitmq0 did not stop); `mqbed down` retries",
    ]
