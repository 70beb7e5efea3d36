"""The fault proxy between real clients and real brokers (no mocks).

Message paths go producer → broker (direct) and broker → proxy link → consumer, so a toxic on
the consumer link shows in end-to-end latency, delivery rate and delivery gaps. Socket-level
toxics (reset_peer, timeout, limit_data, slow_close, slicer) are checked with raw sockets
speaking the first bytes of AMQP to RabbitMQ through the proxy.
"""

from __future__ import annotations

import dataclasses
import os
import random
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from testbed.backends.base import BrokerEndpoint
from testbed.brokers import ConnectionLost, QueueDecl, make_adapter
from testbed.faults.api import ProxyClient
from testbed.faults.proxy import FaultProxy
from testbed.faults.toxic_spec import NotFoundError, ToxicError, applies

from .faultkit import AMQP_HEADER, Drainer, publish_paced, read_until_eof, start_frame

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    p = FaultProxy(seed=11).start()
    try:
        yield p
    finally:
        p.stop()


def via(proxy: FaultProxy, ep: BrokerEndpoint, link: str) -> BrokerEndpoint:
    """`ep` as seen through a new proxy link."""
    return dataclasses.replace(ep, port=proxy.add_link(link, ep.host, ep.port))


@pytest.fixture
def queue_on(rabbitmq: BrokerEndpoint) -> Iterator[Any]:
    """``queue_on(ep)`` → a fresh non-durable queue name declared on `ep`'s broker."""
    adapters = []

    def make(ep: BrokerEndpoint = rabbitmq, *, prefix: str = "fp") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        a = make_adapter(ep)
        a.connect()
        a.declare([QueueDecl(name, durable=False)])
        adapters.append(a)
        return name

    yield make
    for a in adapters:
        a.close()


# --- toxics on real broker traffic ------------------------------------------------------------


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
def test_latency_toxic_shifts_median_end_to_end_latency(
    broker: str, request: pytest.FixtureRequest, proxy: FaultProxy, queue_on: Any
) -> None:
    ep: BrokerEndpoint = request.getfixturevalue(broker)
    queue = queue_on(ep)
    drainer = Drainer(via(proxy, ep, "consumers"), queue)
    drainer.start()
    assert drainer.ready.wait(10) and drainer.error is None, drainer.error

    def latencies(n: int) -> list[float]:
        before = len(drainer.rows)
        publish_paced(ep, queue, n, rate=100)
        drainer.wait_for(before + n, 10.0)
        rows = drainer.rows[before:]
        assert len(rows) == n, f"{len(rows)} of {n} delivered"
        return [r - p for r, p, _ in rows]

    base: list[float] = []
    toxic: list[float] = []
    for _ in range(3):  # interleaved: the shared machine's load drifts
        base += latencies(40)
        proxy.add_toxic("consumers", {"type": "latency", "attributes": {"latency": 50}})
        toxic += latencies(40)
        proxy.remove_toxic("consumers", "latency_downstream")
    drainer.finish()
    assert drainer.error is None
    shift = statistics.median(toxic) - statistics.median(base)
    assert 0.040 <= shift <= 0.060, (
        f"median base {statistics.median(base) * 1e3:.2f} ms, toxic "
        f"{statistics.median(toxic) * 1e3:.2f} ms (load {os.getloadavg()[0]:.1f})"
    )


def test_bandwidth_toxic_caps_delivery_rate(
    rabbitmq: BrokerEndpoint, proxy: FaultProxy, queue_on: Any
) -> None:
    queue = queue_on()
    publish_paced(rabbitmq, queue, 40, rate=1e6, size=10_000)  # 400 kB waiting
    link_ep = via(proxy, rabbitmq, "consumers")
    proxy.add_toxic("consumers", {"type": "bandwidth", "attributes": {"rate": 200}})  # 200 KB/s
    drainer = Drainer(link_ep, queue)
    drainer.start()
    drainer.wait_for(40, 10.0)
    drainer.finish()
    assert drainer.error is None and len(drainer.rows) == 40
    t = [r for r, _, _ in drainer.rows]
    rate = sum(s for _, _, s in drainer.rows[1:]) / (t[-1] - t[0])
    assert 0.85 * 200e3 <= rate <= 1.05 * 200e3, f"{rate / 1e3:.1f} kB/s of bodies"


def test_blackhole_partition_stops_delivery_and_it_resumes_on_the_same_connection(
    rabbitmq: BrokerEndpoint, proxy: FaultProxy, queue_on: Any
) -> None:
    queue = queue_on()
    drainer = Drainer(via(proxy, rabbitmq, "consumers"), queue)
    drainer.start()
    assert drainer.ready.wait(10) and drainer.error is None
    blackhole = {"type": "down", "attributes": {"mode": "blackhole"}}
    cut: dict[str, float] = {}

    def partition() -> None:
        time.sleep(1.0)
        cut["start"] = time.time()
        for stream in ("upstream", "downstream"):
            proxy.add_toxic("consumers", {**blackhole, "stream": stream})
        time.sleep(1.0)
        for stream in ("upstream", "downstream"):
            proxy.remove_toxic("consumers", f"down_{stream}")
        cut["end"] = time.time()

    cutter = threading.Thread(target=partition)
    cutter.start()
    publish_paced(rabbitmq, queue, 300, rate=100)
    cutter.join()
    drainer.wait_for(300, 10.0)
    drainer.finish()
    assert drainer.error is None, "the connection survived the partition"
    assert sorted(drainer.ids) == sorted(f"m{i}" for i in range(300))
    received = [r for r, _, _ in drainer.rows]
    during = [r for r in received if cut["start"] + 0.05 < r < cut["end"] - 0.01]
    assert during == [], f"{len(during)} deliveries during the partition"
    gap = max(b - a for a, b in zip(received, received[1:], strict=False))
    assert 0.85 <= gap <= 1.3, gap


def test_refusing_link_resets_connections_and_refuses_new_ones(
    rabbitmq: BrokerEndpoint, proxy: FaultProxy, queue_on: Any
) -> None:
    queue = queue_on()
    link_ep = via(proxy, rabbitmq, "consumers")
    drainer = Drainer(link_ep, queue)
    drainer.start()
    assert drainer.ready.wait(10) and drainer.error is None
    proxy.set_enabled("consumers", False)
    drainer.join(3.0)
    assert isinstance(drainer.error, ConnectionLost), drainer.error
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", link_ep.port), timeout=2).close()
    with pytest.raises(ConnectionLost):
        make_adapter(link_ep).connect()
    proxy.set_enabled("consumers", True)
    publish_paced(rabbitmq, queue, 5, rate=1000)
    again = Drainer(link_ep, queue)
    again.start()
    again.wait_for(5, 5.0)
    again.finish()
    assert again.error is None and len(again.rows) == 5
    # the same through a `down` toxic with mode refuse
    proxy.add_toxic("consumers", {"type": "down", "attributes": {"mode": "refuse"}})
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", link_ep.port), timeout=2).close()
    proxy.remove_toxic("consumers", "down_downstream")
    socket.create_connection(("127.0.0.1", link_ep.port), timeout=2).close()


# --- socket-level toxics, raw AMQP bytes -----------------------------------------------------


def wait_for_bytes(sock: socket.socket, n: int, timeout: float) -> None:
    """Until `n` bytes wait in `sock`'s receive buffer (peeked: still there to read)."""
    deadline = time.monotonic() + timeout
    while len(sock.recv(n, socket.MSG_PEEK)) < n:
        assert time.monotonic() < deadline, f"fewer than {n} bytes arrived in {timeout} s"
        time.sleep(0.005)


def wait_for_connections(proxy: FaultProxy, link: str, n: int, timeout: float) -> None:
    """Until link `link` holds exactly `n` client connections."""
    deadline = time.monotonic() + timeout
    while (count := proxy.connections(link)) != n:
        assert time.monotonic() < deadline, f"link {link}: {count} connections, not {n}"
        time.sleep(0.005)


def test_socket_level_toxics(rabbitmq: BrokerEndpoint, proxy: FaultProxy) -> None:
    port = proxy.add_link("raw", rabbitmq.host, rabbitmq.port)
    direct = start_frame(rabbitmq.port)
    assert start_frame(port) == direct

    # reset_peer: data passes, then a RST after `timeout` ms (counted from the toxic's start)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(AMQP_HEADER)
        wait_for_bytes(s, len(direct), 5.0)  # the reply came through before the toxic
        proxy.add_toxic("raw", {"type": "reset_peer", "attributes": {"timeout": 300}})
        data, took, how = read_until_eof(s, 3.0)
    proxy.remove_toxic("raw", "reset_peer_downstream")
    assert data == direct and how == "reset" and 0.25 <= took <= 0.8, (how, took)

    # timeout 300: nothing gets through, the connection is closed after 300 ms
    proxy.add_toxic(
        "raw", {"type": "timeout", "stream": "upstream", "attributes": {"timeout": 300}}
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(AMQP_HEADER)
        data, took, how = read_until_eof(s, 3.0)
    proxy.remove_toxic("raw", "timeout_upstream")
    assert data == b"" and how == "eof" and 0.25 <= took <= 0.8, (how, took)

    # timeout 0: data dropped, connection kept; once removed, data flows again
    wait_for_connections(proxy, "raw", 0, 5.0)  # the earlier ones are gone
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        wait_for_connections(proxy, "raw", 1, 5.0)  # the toxic meets a live connection
        proxy.add_toxic(
            "raw", {"type": "timeout", "stream": "upstream", "attributes": {"timeout": 0}}
        )
        s.sendall(AMQP_HEADER)
        data, took, how = read_until_eof(s, 0.6)
        assert data == b"" and how == "timeout"
        proxy.remove_toxic("raw", "timeout_upstream")
        s.sendall(AMQP_HEADER)  # the first one was dropped
        s.settimeout(3)
        assert s.recv(7)[:1] == b"\x01"

    # limit_data: exactly `bytes` bytes, then the connection is closed
    proxy.add_toxic("raw", {"type": "limit_data", "attributes": {"bytes": 100}})
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(AMQP_HEADER)
        data, took, how = read_until_eof(s, 3.0)
    proxy.remove_toxic("raw", "limit_data_downstream")
    assert data == direct[:100] and how == "eof"

    # slow_close: RabbitMQ resets a connection whose client half-closes; that close (here a
    # RST) reaches the client `delay` late — and at once without the toxic
    def close_after_half_close() -> tuple[bytes, float, str]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(AMQP_HEADER)
            s.settimeout(5)
            data = b""
            while not data.endswith(b"\xce"):
                data += s.recv(65536)
            s.shutdown(socket.SHUT_WR)
            return read_until_eof(s, 3.0)

    _, quick, how = close_after_half_close()
    assert how in ("eof", "reset") and quick < 0.2, (how, quick)
    proxy.add_toxic("raw", {"type": "slow_close", "attributes": {"delay": 400}})
    _, took, how = close_after_half_close()
    proxy.remove_toxic("raw", "slow_close_downstream")
    assert how in ("eof", "reset") and 0.39 <= took < 1.0, (how, took)

    # slicer: same bytes, in ~50-byte pieces 20 ms apart
    slicer = {"average_size": 50, "size_variation": 10, "delay": 20_000}
    proxy.add_toxic("raw", {"type": "slicer", "attributes": slicer})
    t0 = time.monotonic()
    assert start_frame(port) == direct
    took = time.monotonic() - t0
    proxy.remove_toxic("raw", "slicer_downstream")
    assert took >= 0.9 * 0.02 * (len(direct) / 60 - 1), (took, len(direct))


def test_toxicity_is_drawn_once_per_connection_from_the_seed(
    rabbitmq: BrokerEndpoint, proxy: FaultProxy
) -> None:
    port = proxy.add_link("dice", rabbitmq.host, rabbitmq.port)
    # 1 s against a 0.5 s threshold: a busy machine's broker can take over 0.2 s to send
    # Connection.Start on a link without the toxic (seen in two full make tests: 0.1 s with a
    # 400 ms toxic, then 0.2 s); a toxic link still takes twice the threshold
    proxy.add_toxic("dice", {"type": "latency", "toxicity": 0.5, "attributes": {"latency": 1000}})
    slow, took = [], []
    for _ in range(16):
        t0 = time.monotonic()
        start_frame(port)
        took.append(round(time.monotonic() - t0, 3))
        slow.append(took[-1] > 0.5)
    expected = [applies(0.5, random.Random(f"11:dice:{seq}")) for seq in range(1, 17)]
    assert slow == expected, took
    assert 0 < sum(slow) < 16


# --- the HTTP API -----------------------------------------------------------------------------


def test_http_api_round_trip_like_toxiproxy(rabbitmq: BrokerEndpoint, proxy: FaultProxy) -> None:
    api = proxy.api_url
    assert api is not None and api.startswith("http://127.0.0.1:")
    assert "toxiproxy" in requests.get(f"{api}/version", timeout=5).json()["version"]
    body = {
        "name": "http-link",
        "listen": "127.0.0.1:0",
        "upstream": f"127.0.0.1:{rabbitmq.port}",
        "enabled": True,
    }
    r = requests.post(f"{api}/proxies", json=body, timeout=5)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["name"] == "http-link" and created["enabled"] is True
    assert created["upstream"] == body["upstream"] and created["toxics"] == []
    port = int(created["listen"].rpartition(":")[2])
    r = requests.post(f"{api}/proxies", json=body, timeout=5)
    assert r.status_code == 409 and "already exists" in r.json()["error"]
    r = requests.post(
        f"{api}/proxies", json={**body, "name": "x", "listen": "0.0.0.0:0"}, timeout=5
    )
    assert r.status_code == 400 and "127.0.0.1 only" in r.json()["error"]

    toxic = {
        "name": "lat",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": 20, "jitter": 0},
    }
    r = requests.post(f"{api}/proxies/http-link/toxics", json=toxic, timeout=5)
    assert r.status_code == 200 and r.json() == toxic
    assert requests.get(f"{api}/proxies/http-link/toxics", timeout=5).json() == [toxic]
    assert requests.get(f"{api}/proxies/http-link/toxics/lat", timeout=5).json() == toxic
    r = requests.post(
        f"{api}/proxies/http-link/toxics/lat", json={"attributes": {"latency": 60}}, timeout=5
    )
    assert r.status_code == 200 and r.json()["attributes"] == {"latency": 60, "jitter": 0}
    t0 = time.monotonic()
    assert start_frame(port).startswith(b"\x01")
    assert time.monotonic() - t0 >= 0.058

    r = requests.post(f"{api}/proxies/http-link/toxics", json={"type": "latncy"}, timeout=5)
    assert r.status_code == 400 and "'latncy'" in r.json()["error"]
    r = requests.get(f"{api}/proxies/nope", timeout=5)
    assert r.status_code == 404 and r.json() == {
        "error": "no link (proxy) named 'nope'",
        "status": 404,
    }
    assert requests.get(f"{api}/reset", timeout=5).status_code == 405

    adapter = make_adapter(dataclasses.replace(rabbitmq, port=port))
    adapter.connect()  # a real client through a link made over HTTP
    adapter.declare([QueueDecl(f"http-{uuid.uuid4().hex[:6]}", durable=False)])
    adapter.close()

    r = requests.post(f"{api}/proxies/http-link", json={"enabled": False}, timeout=5)
    assert r.status_code == 200 and r.json()["enabled"] is False
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    requests.post(f"{api}/proxies/http-link", json={"enabled": True}, timeout=5)
    assert start_frame(port).startswith(b"\x01")

    assert requests.delete(f"{api}/proxies/http-link/toxics/lat", timeout=5).status_code == 204
    assert requests.get(f"{api}/proxies/http-link/toxics", timeout=5).json() == []
    requests.post(
        f"{api}/proxies/http-link/toxics",
        json={"type": "bandwidth", "attributes": {"rate": 1}},
        timeout=5,
    )
    assert requests.post(f"{api}/reset", timeout=5).status_code == 204
    listing = requests.get(f"{api}/proxies", timeout=5).json()
    assert listing["http-link"]["toxics"] == [] and listing["http-link"]["enabled"] is True
    assert requests.delete(f"{api}/proxies/http-link", timeout=5).status_code == 204
    assert requests.get(f"{api}/proxies/http-link", timeout=5).status_code == 404

    client = ProxyClient(api)  # the same, as FaultProxy's methods over HTTP
    cport = client.add_link("client-link", "127.0.0.1", rabbitmq.port)
    assert (
        client.add_toxic("client-link", {"type": "latency", "attributes": {"latency": 5}})["name"]
        == "latency_downstream"
    )
    assert [t["name"] for t in client.toxics("client-link")] == ["latency_downstream"]
    assert start_frame(cport).startswith(b"\x01")
    client.remove_toxic("client-link", "latency_downstream")
    with pytest.raises(NotFoundError):
        client.remove_toxic("client-link", "latency_downstream")
    with pytest.raises(ToxicError, match="stream"):
        client.add_toxic("client-link", {"type": "latency", "stream": "sideways"})
    client.set_enabled("client-link", False)
    assert client.links()["client-link"]["enabled"] is False
    client.reset()
    client.remove_link("client-link")
    assert proxy.links() == {}
