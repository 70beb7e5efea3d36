"""The docker backend on a real engine: isolation, state, and container faults with their effect.

Brokers run from the offline images with host networking; every check is against the real
thing: listening sockets (psutil), the engine's view of the containers, the brokers' answers.
"""

from __future__ import annotations

import json
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from testbed.backends.base import BrokerEndpoint
from testbed.backends.docker import STATE_FILE, DockerBackend
from testbed.brokers import AdapterError, BrokerAdapter, QueueDecl, make_adapter
from testbed.exceptions import BackendError
from tests.integration.conftest import start_or_fail
from tests.integration.faultkit import DURABLE_SETTLE_S

pytestmark = pytest.mark.docker

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
BODY = b"x" * 200
CLIENT = {"rabbitmq": "pika", "activemq": "stomp"}


def _listening(ports: set[int]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in ports:
            found.setdefault(conn.laddr.port, set()).add(conn.laddr.ip)
    return found


def _ports(ep: BrokerEndpoint) -> set[int]:
    return {ep.port, *ep.extra_ports.values()}


def _connect(ep: BrokerEndpoint) -> BrokerAdapter:
    adapter = make_adapter(ep, CLIENT[ep.kind])
    adapter.connect()
    return adapter


def test_containers_are_isolated_on_loopback_with_generated_credentials(
    docker_backend: DockerBackend, rabbitmq: BrokerEndpoint, activemq: BrokerEndpoint
) -> None:
    for ep in (rabbitmq, activemq):
        assert ep.host == "127.0.0.1"
        assert ep.username.startswith("mqbed-") and ep.username != "guest"
        assert len(ep.password) >= 16
        listening = _listening(_ports(ep))
        assert set(listening) == _ports(ep), (
            f"{ep.name}: not listening on {_ports(ep) - set(listening)}"
        )
        for port, addresses in listening.items():
            assert addresses <= LOOPBACK, f"{ep.name} port {port} listens on {addresses}"
        container = docker_backend.container(ep.name)
        assert container.attrs["HostConfig"]["NetworkMode"] == "host"
        assert set(container.attrs["NetworkSettings"]["Networks"]) == {"host"}
        assert container.labels["org.mqbed.home"] == str(docker_backend.home)
    # guest/guest does not exist; the generated user does
    api = f"{rabbitmq.management_url}/api/whoami"
    for user, password, expect in (
        ("guest", "guest", 401),
        (rabbitmq.username, rabbitmq.password, 200),
    ):
        request = urllib.request.Request(api)
        token = f"{user}:{password}".encode()
        import base64

        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == expect, (user, status)
    state = docker_backend.state_path
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    recorded = {n["name"]: n for n in json.loads(state.read_text())["nodes"]}
    assert {"rabbitmq0", "activemq0"} <= set(recorded)
    assert recorded["rabbitmq0"]["password"] == rabbitmq.password


def test_down_from_another_object_removes_every_container(
    fresh_backend: Callable[[str], DockerBackend],
) -> None:
    first = fresh_backend("a")
    (ep,) = start_or_fail(first, ["activemq"], label="down", detach=True, warm=False)  # type: ignore[arg-type]
    container_id = first.container(ep.name).id
    assert first.up(["activemq"], detach=True)[0].port == ep.port  # reused, not restarted
    other = DockerBackend(first.home, first.docker_host)  # knows only the state file
    assert other.down() == ["activemq0"]
    assert not (first.home / STATE_FILE).exists()
    client = other._client()
    assert not client.containers.list(all=True, filters={"id": container_id})
    assert not client.containers.list(all=True, filters={"label": f"org.mqbed.home={first.home}"})
    assert other.down() == []  # idempotent
    other.close()
    with pytest.raises(BackendError, match="no docker testbed"):
        other.kill_node("activemq0")


def test_mqbed_down_removes_containers_whose_home_is_gone(
    docker_client: Any, broker_images: dict[str, str], tmp_path: Any
) -> None:
    """A run or test session killed before its clean-up, whose home was then deleted, leaves
    containers no state file names: `mqbed down` (any home) removes those, and only those."""
    import uuid

    from typer.testing import CliRunner

    from testbed.cli import app

    homes = {"orphan": tmp_path / "deleted-home", "owned": tmp_path / "live-home"}
    homes["owned"].mkdir()
    made = {}
    try:
        for role, home in homes.items():
            made[role] = docker_client.containers.run(
                broker_images["rabbitmq"], ["300"], entrypoint=["sleep"], detach=True,
                network_mode="host", name=f"mqbed-test-{role}-{uuid.uuid4().hex[:8]}",
                labels={"org.mqbed.home": str(home)},
            )  # fmt: skip
        result = CliRunner().invoke(app, ["down", "--home", str(tmp_path / "h"), "--json"])
        assert result.exit_code == 0, result.output
        stopped = json.loads(result.stdout)["stopped"]
        assert f"{made['orphan'].name} (orphaned container)" in stopped, stopped
        assert not any(made["owned"].name in s for s in stopped), stopped
        names = {c.name for c in docker_client.containers.list(all=True)}
        assert made["orphan"].name not in names and made["owned"].name in names
    finally:
        for c in made.values():
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone (the orphan, removed by down)
                pass


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_pause_stalls_the_broker_and_resume_lets_it_finish(
    kind: str, fresh_backend: Callable[[str], DockerBackend]
) -> None:
    backend = fresh_backend(f"pause-{kind}")
    (ep,) = start_or_fail(backend, [kind], label=f"pause {kind}", detach=False, warm=False)  # type: ignore[arg-type, list-item]
    adapter = _connect(ep)
    try:
        adapter.declare([QueueDecl("pause.q")])
        producer = adapter.producer("pause.q", persistent=True, confirms=True)
        t = time.monotonic()
        assert producer.publish_and_wait(BODY, msg_id="before", timeout=5).ok
        baseline = time.monotonic() - t
        pause_s = 2.0
        backend.pause_node(ep.name)
        assert backend.container(ep.name).status == "paused"
        assert not backend.is_healthy(ep.name, timeout=0.5)
        resumed: list[float] = []

        def resume() -> None:
            backend.resume_node(ep.name)
            resumed.append(time.monotonic())

        resumer = threading.Timer(pause_s, resume)
        t = time.monotonic()
        resumer.start()
        confirm = producer.publish_and_wait(BODY, msg_id="during", timeout=20)
        done = time.monotonic()
        resumer.join()
        assert confirm.ok
        # the measured effect: the confirm waited for the pause to end, and came right after
        # the container was running again (not seconds later)
        stalled, after = done - t, done - resumed[0]
        assert stalled >= pause_s - 0.3 and after <= baseline + 1.0, (baseline, stalled, after)
        assert baseline < 1.0
        assert backend.is_healthy(ep.name)
        consumer = adapter.consumer("pause.q", prefetch=10)
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += consumer.drain(0.5)
        assert [d.msg_id for d in got] == ["before", "during"]
        for d in got:
            d.ack()
    finally:
        adapter.close()


@pytest.mark.parametrize("kind", ["rabbitmq", "activemq"])
def test_kill_is_a_crash_and_restart_keeps_every_confirmed_persistent_message(
    kind: str, fresh_backend: Callable[[str], DockerBackend]
) -> None:
    backend = fresh_backend(f"kill-{kind}")
    (ep,) = start_or_fail(backend, [kind], label=f"kill {kind}", detach=False, warm=False)  # type: ignore[arg-type, list-item]
    adapter = _connect(ep)
    ids = [f"k{i}" for i in range(20)]
    try:
        adapter.declare([QueueDecl("kill.q", durable=True)])
        time.sleep(DURABLE_SETTLE_S)  # a queue declared just before a crash can be lost with it
        producer = adapter.producer("kill.q", persistent=True, confirms=True)
        for msg_id in ids:
            assert producer.publish_and_wait(BODY, msg_id=msg_id, timeout=5).ok
        t_kill = time.monotonic()
        took = backend.kill_node(ep.name)
        assert took is not None and 0.0 < took <= time.monotonic() - t_kill, took
        container = backend.container(ep.name)
        assert container.status == "exited"
        assert container.attrs["State"]["ExitCode"] == 137  # SIGKILL, not a clean stop
        assert not backend.is_healthy(ep.name, timeout=0.5)
        assert not _listening({ep.port})
        # the measured effect on a client: no confirm for a publish into a dead broker
        try:
            after = producer.publish_and_wait(BODY, msg_id="into-the-void", timeout=3)
            assert not after.ok
        except AdapterError:
            pass
    finally:
        adapter.close()
    ep = backend.restart_node(ep.name, timeout=90)
    downtime = time.monotonic() - t_kill
    assert backend.is_healthy(ep.name)
    reader = _connect(ep)
    try:
        # as every client does on (re)connect (the workload's users too)
        reader.declare([QueueDecl("kill.q", durable=True)])
        consumer = reader.consumer("kill.q", prefetch=100)
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < len(ids) and time.monotonic() < deadline:
            got += consumer.drain(0.5)
        assert sorted(d.msg_id for d in got) == sorted(ids), (
            f"lost after crash (down {downtime:.1f} s)"
        )
        for d in got:
            d.ack()
    finally:
        reader.close()
