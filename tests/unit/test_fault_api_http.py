"""The fault proxy's HTTP API on 127.0.0.1 (h11 underneath), driven over real sockets: no broker,
only the proxy's own loop. Framing a hand-written parser got wrong (chunked bodies, missing
Host, oversized and malformed requests) is checked byte by byte."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from testbed.faults.api import VERSION, ProxyClient
from testbed.faults.proxy import FaultProxy


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy(seed=1, api_port=0) as fp:
        yield fp


def _raw(proxy: FaultProxy, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as is; (status, headers, body) of the answer."""
    assert proxy.api_url is not None
    port = int(proxy.api_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    return int(status_line.split()[1]), headers, body


def test_client_round_trip(proxy: FaultProxy) -> None:
    assert proxy.api_url is not None
    client = ProxyClient(proxy.api_url, timeout=5)
    assert client.request("GET", "/version") == {"version": VERSION}
    port = client.add_link("amqp", "127.0.0.1", 1, 0)
    assert port > 0 and client.links()["amqp"]["upstream"] == "127.0.0.1:1"
    toxic = client.add_toxic("amqp", {"type": "latency", "attributes": {"latency": 20}})
    assert toxic["attributes"] == {"latency": 20, "jitter": 0}
    assert [t["name"] for t in client.toxics("amqp")] == ["latency_downstream"]
    client.remove_toxic("amqp", "latency_downstream")
    assert client.toxics("amqp") == []


def test_chunked_body_is_read(proxy: FaultProxy) -> None:
    body = json.dumps({"name": "c", "upstream": "127.0.0.1:1"}).encode()
    chunks = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    status, headers, answer = _raw(
        proxy,
        b"POST /proxies HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks,
    )
    assert status == 201 and json.loads(answer)["name"] == "c"
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(answer)


@pytest.mark.parametrize(
    ("request_bytes", "status", "error"),
    [
        (b"GARBAGE\r\n\r\n", 400, "bad request"),
        (b"GET /version HTTP/1.1\r\n\r\n", 400, "bad request"),  # HTTP/1.1 without Host
        (b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n{x}", 400, "not JSON"),
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, "no such path: /nowhere"),
        (b"DELETE /version HTTP/1.1\r\nHost: x\r\n\r\n", 405, "DELETE not allowed"),
    ],
)
def test_bad_requests_get_json_errors(
    proxy: FaultProxy, request_bytes: bytes, status: int, error: str
) -> None:
    got, headers, body = _raw(proxy, request_bytes)
    assert got == status
    answer = json.loads(body)
    assert answer["status"] == status and error in answer["error"]


def test_oversized_body_is_refused(proxy: FaultProxy) -> None:
    size = (1 << 20) + 10
    head = b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size
    status, _, body = _raw(proxy, head + b" " * size)
    assert status == 413 and "limit" in json.loads(body)["error"]


def test_no_content_has_no_body(proxy: FaultProxy) -> None:
    status, headers, body = _raw(proxy, b"POST /reset HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 204 and body == b"" and "content-length" not in headers
