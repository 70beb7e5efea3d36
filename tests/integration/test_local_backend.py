"""The local backend against real RabbitMQ and ActiveMQ processes (no mocks).

Covers: start + health + isolation (loopback only, generated credentials, free ports), two
testbeds side by side, `down` from another process using only the state file, durable data
across a graceful restart and across a crash + restart, SIGKILL / SIGTERM of an owning process,
and pause/resume really stalling a broker.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import pika
import pytest
import stomp

from testbed.backends.base import BrokerEndpoint
from testbed.backends.local import LocalBackend
from testbed.backends.procs import descendants
from testbed.exceptions import BackendError, ConfigurationError

from .conftest import record_startup, start_or_fail

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PORTS = {4369, 5672, 15672, 15692, 25672, 61613, 61616, 8161}


# ----------------------------------------------------------------------------- process table


def _processes() -> Iterable[tuple[int, int, str, str]]:
    """(pid, pgid, state, cmdline) of every process, zombies included."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmd = (
                Path(entry.path, "cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        yield int(entry.name), int(fields[2]), fields[0], cmd


def leftovers(home: Path, pids: set[int], pgids: set[int]) -> list[str]:
    """Live processes that are one of `pids`, in one of `pgids`, or mention `home`."""
    found = []
    for pid, pgid, state, cmd in _processes():
        if state in "ZXx" or pid == os.getpid():
            continue
        if pid in pids or pgid in pgids or str(home) in cmd:
            found.append(f"{pid} (pgid {pgid}): {cmd[:160]}")
    return found


def wait_no_leftovers(home: Path, pids: set[int], pgids: set[int], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (found := leftovers(home, pids, pgids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def processes_of(backend: LocalBackend) -> tuple[set[int], set[int]]:
    """PIDs (nodes, their helpers, epmd) and process groups a running testbed consists of."""
    state = json.loads(backend.state_path.read_text())
    pids = {n["process"]["pid"] for n in state["nodes"]}
    if state["epmd"]:
        pids.add(state["epmd"]["pid"])
    pgids = set(pids)
    for pid in list(pids):
        pids.update(ref.pid for ref in descendants(pid))
    return pids, pgids


def listening_addresses(pid: int) -> set[str]:
    """Local addresses of the TCP sockets `pid` listens on (from /proc/net/tcp{,6})."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                addresses.add(cols[1].split(":")[0])
    return addresses


LOOPBACK_HEX = {
    "0100007F",  # 127.0.0.1
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1 (Java)
    "00000000000000000000000001000000",  # ::1
}


# ----------------------------------------------------------------------------- protocol probes


def stomp_login(port: int, user: str, password: str, timeout: float) -> bytes:
    """The answer to a STOMP CONNECT: the reply frame's command (``CONNECTED``, ``ERROR``),
    ``closed`` when the broker closed the connection without one, ``silent`` on timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(
            f"CONNECT\naccept-version:1.2\nhost:127.0.0.1\nlogin:{user}\npasscode:{password}\n\n\0".encode()
        )
        sock.settimeout(timeout)
        try:
            reply = sock.recv(4096)
        except TimeoutError:
            return b"silent"
        except ConnectionResetError:
            return b"closed"
    return reply.split(b"\n", 1)[0] if reply else b"closed"


def stomp_reply(port: int, user: str, password: str, timeout: float) -> bytes:
    """`stomp_login`'s answer, b'' when none came within `timeout` (the socket stays open)."""
    reply = stomp_login(port, user, password, timeout)
    return b"" if reply == b"silent" else reply


def amqp_reply(port: int, timeout: float) -> bytes:
    """Send the AMQP 0-9-1 protocol header; the broker's first frame, or b'' on timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sock.settimeout(timeout)
        try:
            return sock.recv(4096)
        except TimeoutError:
            return b""


def http_status(url: str, user: str, password: str) -> int:
    mgr = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    mgr.add_password(None, url, user, password)
    opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(mgr))
    try:
        with opener.open(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def all_ports(endpoints: Iterable[BrokerEndpoint]) -> list[int]:
    return [p for e in endpoints for p in (e.port, *e.extra_ports.values())]


# ----------------------------------------------------------------------------- tests


def test_session_brokers_are_healthy_isolated_and_on_loopback(
    local_backend: LocalBackend, rabbitmq: BrokerEndpoint, activemq: BrokerEndpoint
) -> None:
    assert local_backend.is_healthy(rabbitmq.name) and local_backend.is_healthy(activemq.name)
    assert (rabbitmq.kind, activemq.kind) == ("rabbitmq", "activemq")
    assert rabbitmq.version and rabbitmq.version.startswith("3.")
    assert activemq.version and activemq.version.startswith("5.")

    ports = all_ports([rabbitmq, activemq])
    assert len(ports) == len(set(ports)), f"ports overlap: {ports}"
    assert not set(ports) & DEFAULT_PORTS, f"a default port was used: {ports}"
    for ep in (rabbitmq, activemq):
        assert ep.host == "127.0.0.1"
        assert ep.username not in ("guest", "admin", "system") and len(ep.password) >= 16
        assert ep.pid and ep.pgid == ep.pid and ep.data_dir
        assert Path(ep.data_dir).is_relative_to(local_backend.home)
        bound = listening_addresses(ep.pid)
        assert bound and bound <= LOOPBACK_HEX, f"{ep.name} listens beyond loopback: {bound}"

    assert rabbitmq.management_url and rabbitmq.prometheus_url
    overview = f"{rabbitmq.management_url}/api/overview"
    assert http_status(overview, rabbitmq.username, rabbitmq.password) == 200
    assert http_status(overview, "guest", "guest") == 401
    assert http_status(f"{rabbitmq.prometheus_url}/metrics", "", "") == 200
    refused = stomp_login(activemq.port, "guest", "guest", 15)
    # ActiveMQ answers a bad login with an ERROR frame and closes; under load the close may
    # reach this socket first. Either is a refusal; a CONNECTED frame or silence is not.
    assert refused in (b"ERROR", b"closed"), refused

    ctl = local_backend.rabbitmqctl(rabbitmq.name, "list_users", timeout=60)
    assert ctl.returncode == 0, ctl.stderr
    assert rabbitmq.username in ctl.stdout and "guest" not in ctl.stdout

    state_mode = local_backend.state_path.stat().st_mode & 0o777
    assert state_mode == 0o600, oct(state_mode)
    print(f"\nstart-up seconds: {local_backend.startup_seconds}")


def test_pause_stalls_broker_and_resume_recovers(
    local_backend: LocalBackend, rabbitmq: BrokerEndpoint, activemq: BrokerEndpoint
) -> None:
    probes: dict[str, Callable[[float], bytes]] = {
        activemq.name: lambda t: stomp_reply(
            activemq.port, activemq.username, activemq.password, t
        ),
        rabbitmq.name: lambda t: amqp_reply(rabbitmq.port, t),
    }
    for name, probe in probes.items():
        assert probe(5.0), f"{name} does not answer before the pause"
        local_backend.pause_node(name)
        try:
            assert probe(1.0) == b"", f"{name} answered while paused"
            assert not local_backend.is_healthy(name, timeout=1.0)
        finally:
            local_backend.resume_node(name)
        assert probe(10.0), f"{name} does not answer after resume"
        assert local_backend.is_healthy(name, timeout=5.0)


def test_second_testbed_does_not_collide_and_down_from_another_process(
    local_backend: LocalBackend,
    rabbitmq: BrokerEndpoint,
    activemq: BrokerEndpoint,
    fresh_backend: Callable[[str], LocalBackend],
) -> None:
    second = fresh_backend("second")
    started = time.monotonic()
    endpoints = start_or_fail(second, ["rabbitmq", "activemq"], label="2nd testbed", detach=True)
    elapsed = time.monotonic() - started
    print(f"\nsecond testbed up (both brokers) in {elapsed:.1f} s: {second.startup_seconds}")
    assert elapsed < 60, f"mqbed up --broker all took {elapsed:.1f} s"

    mine, theirs = all_ports(endpoints), all_ports([rabbitmq, activemq])
    assert not set(mine) & set(theirs), f"port collision: {set(mine) & set(theirs)}"
    assert len(mine) == len(set(mine))
    assert {e.username for e in endpoints}.isdisjoint({rabbitmq.username, activemq.username})
    states = [json.loads(b.state_path.read_text()) for b in (local_backend, second)]
    nodenames = [
        n["params"].get("erlang_node") or n["params"]["broker_name"]
        for s in states
        for n in s["nodes"]
    ]
    assert len(set(nodenames)) == len(nodenames)
    assert states[0]["epmd_port"] != states[1]["epmd_port"]
    assert (second.home / "erlang" / ".erlang.cookie").read_text() != (
        local_backend.home / "erlang" / ".erlang.cookie"
    ).read_text()
    assert all(second.is_healthy(e.name) for e in endpoints)

    pids, pgids = processes_of(second)
    script = "import sys; from testbed.backends.local import LocalBackend; print(LocalBackend(sys.argv[1]).down())"
    done = subprocess.run(
        [sys.executable, "-c", script, str(second.home)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rabbitmq0" in done.stdout and "activemq0" in done.stdout
    assert wait_no_leftovers(second.home, pids, pgids, 10.0) == []
    assert not second.state_path.exists()
    assert second.down() == []  # idempotent
    assert local_backend.is_healthy(rabbitmq.name) and local_backend.is_healthy(activemq.name)


def test_restart_keeps_durable_queue_and_persistent_message(
    fresh_backend: Callable[[str], LocalBackend],
) -> None:
    backend = fresh_backend("restart")
    rmq, amq = start_or_fail(
        backend, ["rabbitmq", "activemq"], label="restart", detach=False, warm=False
    )  # a restart is never warmed up, nor does this test time anything
    queue, body = "mqbed.durable.test", "survives-restart"

    creds = pika.PlainCredentials(rmq.username, rmq.password)
    params = pika.ConnectionParameters(
        "127.0.0.1", rmq.port, credentials=creds, connection_attempts=3
    )
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        ch.basic_publish("", queue, body.encode(), pika.BasicProperties(delivery_mode=2))

    receipts: list[str] = []
    received: list[str] = []

    class Listener(stomp.ConnectionListener):
        def on_receipt(self, frame: stomp.utils.Frame) -> None:
            receipts.append(frame.headers.get("receipt-id", ""))

        def on_message(self, frame: stomp.utils.Frame) -> None:
            received.append(frame.body)

    conn12 = stomp.Connection12([("127.0.0.1", amq.port)])
    conn12.set_listener("l", Listener())
    conn12.connect(amq.username, amq.password, wait=True)
    conn12.send(f"/queue/{queue}", body, headers={"persistent": "true"}, receipt="r1")
    deadline = time.monotonic() + 10  # the receipt: ActiveMQ has stored the message
    while "r1" not in receipts and time.monotonic() < deadline:
        time.sleep(0.02)
    conn12.disconnect()
    assert receipts[:1] == ["r1"], f"no receipt for the persistent SEND in 10 s: {receipts}"

    rmq2 = backend.restart_node(rmq.name)  # graceful stop + start
    t_call = time.monotonic()
    took = backend.kill_node(amq.name)  # crash ...
    # timed from the signal to the process gone, within the call that sent it
    assert took is not None and 0.0 < took <= time.monotonic() - t_call, took
    assert not backend.is_healthy(amq.name)
    amq2 = backend.restart_node(amq.name)  # ... and start
    record_startup("restart", backend, [rmq.name, amq.name])
    for before, after in ((rmq, rmq2), (amq, amq2)):
        assert after.pid != before.pid
        assert (after.port, after.extra_ports, after.data_dir) == (
            before.port,
            before.extra_ports,
            before.data_dir,
        )
        assert (after.username, after.password) == (before.username, before.password)

    with pika.BlockingConnection(params) as conn:
        method, _, got = conn.channel().basic_get(queue, auto_ack=True)
        assert method is not None, "durable RabbitMQ message lost across restart"
        assert got == body.encode()

    conn12 = stomp.Connection12([("127.0.0.1", amq.port)])
    conn12.set_listener("l", Listener())
    conn12.connect(amq.username, amq.password, wait=True)
    conn12.subscribe(f"/queue/{queue}", id="1", ack="auto")
    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    conn12.disconnect()
    assert received == [body], "persistent ActiveMQ message lost across kill + restart"

    pids, pgids = processes_of(backend)
    assert sorted(backend.down()) == ["activemq0", "rabbitmq0"]
    assert wait_no_leftovers(backend.home, pids, pgids, 10.0) == []


def _spawn_owner(home: Path, kinds: list[str]) -> tuple[subprocess.Popen[str], list[dict]]:
    """A python process that does ``up(kinds, detach=False)`` then sleeps; its endpoints."""
    script = (
        "import json, sys, time\n"
        "from testbed.backends.local import LocalBackend\n"
        "eps = LocalBackend(sys.argv[1]).up(sys.argv[2].split(','), detach=False, warm=False)\n"
        "print(json.dumps([e.to_json() for e in eps]), flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script, str(home), ",".join(kinds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    ready, _, _ = select.select([owner.stdout], [], [], 90)
    line = owner.stdout.readline() if ready else ""
    if not line:
        owner.kill()
        _, err = owner.communicate(timeout=30)
        pytest.fail(f"owner process did not start {kinds}: {err[-2000:]}", pytrace=False)
    return owner, json.loads(line)


def test_sigkilled_owner_leaves_no_broker_behind(tmp_path: Path) -> None:
    home = tmp_path / "owned"
    owner, endpoints = _spawn_owner(home, ["rabbitmq", "activemq"])
    try:
        pids, pgids = processes_of(LocalBackend(home))
        assert all(os.path.exists(f"/proc/{e['pid']}") for e in endpoints)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        assert wait_no_leftovers(home, pids, pgids, 15.0) == []
    finally:
        if owner.poll() is None:
            owner.kill()
        LocalBackend(home).down()  # clears the stale state (and anything that survived)
    assert not (home / "state.json").exists()


def test_sigterm_to_owner_stops_brokers_and_clears_state(tmp_path: Path) -> None:
    home = tmp_path / "owned"
    owner, _ = _spawn_owner(home, ["activemq"])
    try:
        pids, pgids = processes_of(LocalBackend(home))
        owner.send_signal(signal.SIGTERM)
        _, err = owner.communicate(timeout=30)
        assert owner.returncode == 128 + signal.SIGTERM, err
        assert leftovers(home, pids, pgids) == []
        assert not (home / "state.json").exists(), f"atexit cleanup left the state: {err}"
    finally:
        if owner.poll() is None:
            owner.kill()
        LocalBackend(home).down()


def test_bad_requests_name_the_bad_value(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "bad")
    with pytest.raises(ConfigurationError, match="'kafka'"):
        backend.up(["kafka"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="nodes.*0"):
        backend.up(["rabbitmq"], nodes=0)
    with pytest.raises(BackendError, match="no testbed running"):
        backend.kill_node("rabbitmq0")
    assert backend.down() == [] and backend.endpoints() == []


def test_a_port_taken_between_pick_and_bind_is_retried_on_fresh_ports(
    fresh_backend: Callable[[str], LocalBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two testbeds starting at once can pick the same free port; the one that binds second
    must start again on fresh ports instead of failing (seen in a full `make test`: a session
    RabbitMQ died of ``eaddrinuse`` on its management port and 45 tests failed with it)."""
    import testbed.backends.local as local_module

    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    real = local_module.pick_free_ports
    calls: list[list[int]] = []

    def pick(count: int, *, exclude: Iterable[int] = ()) -> list[int]:
        ports = real(count, exclude=set(exclude) | {taken})
        if not calls:  # the first pick hands out the taken port as the management port
            ports[1] = taken
        calls.append(ports)
        return ports

    monkeypatch.setattr(local_module, "pick_free_ports", pick)
    backend = fresh_backend("clash")
    try:
        (ep,) = start_or_fail(backend, ["rabbitmq"], label="port clash", detach=False)
    finally:
        held.close()
    assert len(calls) == 2, calls  # one failed start, one on fresh ports
    assert taken in calls[0] and taken not in calls[1]
    assert taken not in all_ports([ep]) and backend.is_healthy(ep.name)
    assert local_module.port_clash("listen_error,{acceptor,{0,0,0,0},1},eaddrinuse")
    assert local_module.port_clash("java.net.BindException: Address already in use")
    assert not local_module.port_clash("rabbitmq node rabbitmq0 exited before becoming healthy")
