"""HTTP API of the fault proxy, shaped like Toxiproxy's, and a client for it.

Served on 127.0.0.1 on the proxy's event loop (one request per connection, JSON bodies). The
HTTP/1.1 protocol (parsing, framing, chunked bodies, malformed input) is h11's; only the routing
below is ours. No web framework on purpose: the API is nine routes on an asyncio loop the proxy
already runs; aiohttp would bring several compiled packages (multidict, yarl, frozenlist, ...),
Starlette a second server (uvicorn) with its own loop and signal handling. h11 is small, pure
Python and already installed with Locust (through wsproto).

Paths, bodies and status codes follow Toxiproxy 2:

    GET    /version                          {"version": ...}
    GET    /proxies                          {name: proxy, ...}
    POST   /proxies                          {"name", "listen": "127.0.0.1:0", "upstream": "h:p",
                                              "enabled"}                          → 201 proxy
    POST   /populate                         [proxy, ...]                        → 201 {"proxies"}
    GET    /proxies/{name}                   proxy
    POST   /proxies/{name}                   {"enabled": false}                   → 200 proxy
    DELETE /proxies/{name}                                                        → 204
    GET    /proxies/{name}/toxics            [toxic, ...]
    POST   /proxies/{name}/toxics            {"name", "type", "stream", "toxicity", "attributes"}
    GET    /proxies/{name}/toxics/{toxic}    toxic
    POST   /proxies/{name}/toxics/{toxic}    {"toxicity"?, "attributes"?}         → 200 toxic
    DELETE /proxies/{name}/toxics/{toxic}                                         → 204
    POST   /reset                                                                 → 204

A proxy is ``{"name", "listen", "upstream", "enabled", "toxics": [...]}`` (plus our
``connections`` count). Errors are ``{"error": message, "status": code}``: 400 bad body or
toxic, 404 unknown proxy/toxic/path, 405 wrong method, 409 name or port taken.

`ProxyClient` drives a proxy in another process through this API with the same methods as
`FaultProxy` (`add_link`, `add_toxic`, `remove_toxic`, `set_enabled`, `reset`, ...).
"""

from __future__ import annotations

__all__ = ["ApiServer", "ProxyClient", "VERSION"]

import asyncio
import contextlib
import json
import logging
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

import h11

from testbed.exceptions import FaultError
from testbed.faults.link import LOOPBACK
from testbed.faults.toxic_spec import ConflictError, NotFoundError, ToxicError

if TYPE_CHECKING:
    from testbed.faults.proxy import ProxyCore

log = logging.getLogger(__name__)

VERSION = "mqbed-faultproxy 1 (toxiproxy-2 compatible API)"
_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Payload Too Large",
    500: "Internal Server Error",
}
_MAX_BODY = 1 << 20
_READ_TIMEOUT = 10.0


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _hostport(where: str, value: object, *, loopback: bool) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise _HttpError(400, f"{where}: expected 'host:port', got {value!r}")
    host, _, port = value.rpartition(":")
    if not port.isdigit():
        raise _HttpError(400, f"{where}: port must be a number, got {value!r}")
    if loopback and host not in ("", LOOPBACK, "localhost"):
        raise _HttpError(400, f"{where}: the proxy listens on {LOOPBACK} only, got {value!r}")
    return host or LOOPBACK, int(port)


class ApiServer:
    """The Toxiproxy-shaped HTTP API for one `ProxyCore` (runs on the core's loop)."""

    def __init__(self, core: ProxyCore) -> None:
        self.core = core
        self.port = 0
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, LOOPBACK, port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            method, path, body = await asyncio.wait_for(_read_request(conn, reader), _READ_TIMEOUT)
            status, payload = self.dispatch(method, path, body)
        except _HttpError as exc:
            status, payload = exc.status, {"error": str(exc), "status": exc.status}
        except (TimeoutError, ConnectionError):
            writer.close()
            return
        except Exception as exc:  # a bug: answer 500 rather than drop the connection
            log.exception("fault proxy API request failed")
            status, payload = 500, {"error": f"internal error: {exc!r}", "status": 500}
        data = b"" if status == 204 else json.dumps(payload).encode()
        headers = [("Content-Type", "application/json"), ("Connection", "close")]
        if status != 204:
            headers.append(("Content-Length", str(len(data))))
        reply = conn.send(
            h11.Response(status_code=status, headers=headers, reason=_REASONS.get(status, ""))
        )
        for event in (h11.Data(data=data), h11.EndOfMessage()) if data else (h11.EndOfMessage(),):
            reply = (reply or b"") + (conn.send(event) or b"")
        with contextlib.suppress(ConnectionError):
            writer.write(reply or b"")
            await writer.drain()
        writer.close()

    def dispatch(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """Route one request; returns (status, JSON payload). Errors become HTTP errors."""
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        try:
            return self._route(method, parts, body)
        except NotFoundError as exc:
            raise _HttpError(404, str(exc)) from exc
        except ConflictError as exc:
            raise _HttpError(409, str(exc)) from exc
        except ToxicError as exc:
            raise _HttpError(400, str(exc)) from exc

    def _route(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        core = self.core
        allowed: tuple[str, ...]
        if parts == ["version"]:
            allowed = ("GET",)
            if method == "GET":
                return 200, {"version": VERSION}
        elif parts == ["reset"]:
            allowed = ("POST",)
            if method == "POST":
                core.reset()
                return 204, None
        elif parts == ["populate"]:
            allowed = ("POST",)
            if method == "POST":
                if not isinstance(body, list):
                    raise _HttpError(400, f"populate: expected a list of proxies, got {body!r}")
                return 201, {"proxies": [self._create(p) for p in body]}
        elif parts == ["proxies"]:
            allowed = ("GET", "POST")
            if method == "GET":
                return 200, {n: k.to_json() for n, k in core.links.items()}
            if method == "POST":
                return 201, self._create(body)
        elif len(parts) == 2 and parts[0] == "proxies":
            allowed = ("GET", "POST", "DELETE")
            link = core.link(parts[1])
            if method == "GET":
                return 200, link.to_json()
            if method == "POST":
                changes = _obj(body, "proxy")
                for key in set(changes) - {"enabled"}:
                    if key not in ("name", "listen", "upstream"):
                        raise _HttpError(400, f"proxy: unknown key {key!r}")
                    if changes[key] != link.to_json()[key]:
                        raise _HttpError(400, f"proxy.{key}: cannot be changed (only 'enabled')")
                enabled = changes.get("enabled", link.enabled)
                if not isinstance(enabled, bool):
                    raise _HttpError(400, f"proxy.enabled: expected true/false, got {enabled!r}")
                link.set_enabled(enabled)
                return 200, link.to_json()
            if method == "DELETE":
                core.remove_link(parts[1])
                return 204, None
        elif len(parts) == 3 and parts[0] == "proxies" and parts[2] == "toxics":
            allowed = ("GET", "POST")
            link = core.link(parts[1])
            if method == "GET":
                return 200, [s.to_json() for s in link.specs.values()]
            if method == "POST":
                return 200, link.add_toxic(_obj(body, "toxic")).to_json()
        elif len(parts) == 4 and parts[0] == "proxies" and parts[2] == "toxics":
            allowed = ("GET", "POST", "DELETE")
            link = core.link(parts[1])
            if method == "GET":
                return 200, link.toxic(parts[3]).to_json()
            if method == "POST":
                return 200, link.update_toxic(parts[3], _obj(body, "toxic")).to_json()
            if method == "DELETE":
                link.remove_toxic(parts[3])
                return 204, None
        else:
            raise _HttpError(404, f"no such path: /{'/'.join(parts)}")
        raise _HttpError(405, f"{method} not allowed on /{'/'.join(parts)} (allowed: {allowed})")

    def _create(self, body: Any) -> dict[str, Any]:
        spec = _obj(body, "proxy")
        unknown = set(spec) - {"name", "listen", "upstream", "enabled"}
        if unknown:
            raise _HttpError(400, f"proxy: unknown key(s) {sorted(unknown)}")
        _, listen = _hostport("proxy.listen", spec.get("listen", f"{LOOPBACK}:0"), loopback=True)
        host, port = _hostport("proxy.upstream", spec.get("upstream"), loopback=False)
        link = self.core.add_link(spec.get("name", ""), host, port, listen)
        if spec.get("enabled", True) is False:
            link.set_enabled(False)
        return link.to_json()


def _obj(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise _HttpError(400, f"{what}: expected a JSON object, got {body!r}")
    return body


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> tuple[str, str, Any]:
    """One request through h11 (request line, headers, Content-Length or chunked body)."""
    request: h11.Request | None = None
    raw = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _HttpError(exc.error_status_hint, f"bad request: {exc}") from exc
        if event is h11.NEED_DATA:
            chunk = await reader.read(65536)
            if not chunk and request is None:
                raise ConnectionError("closed before a request")
            conn.receive_data(chunk)  # b"" tells h11 the peer closed: it then reports an error
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            raw += event.data
            if len(raw) > _MAX_BODY:
                raise _HttpError(413, f"body over the {_MAX_BODY}-byte limit")
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            break
        else:  # ConnectionClosed before the end of the message
            raise ConnectionError("closed in the middle of a request")
    method, path = request.method.decode("ascii").upper(), request.target.decode("latin-1")
    if not bytes(raw).strip():
        return method, path, None
    try:
        return method, path, json.loads(raw)
    except ValueError as exc:
        raise _HttpError(400, f"body is not JSON: {exc}") from exc


class ProxyClient:
    """`FaultProxy`'s control methods over the HTTP API (a proxy in another process)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", str(exc))
            except ValueError:
                message = str(exc)
            error = {404: NotFoundError, 409: ConflictError, 400: ToxicError}.get(
                exc.code, FaultError
            )
            raise error(f"{method} {path}: {message}") from exc
        except OSError as exc:
            raise FaultError(f"{method} {self.url}{path}: {exc}") from exc
        return json.loads(raw) if raw else None

    def add_link(
        self, name: str, upstream_host: str, upstream_port: int, listen_port: int = 0
    ) -> int:
        body = {
            "name": name,
            "listen": f"{LOOPBACK}:{listen_port}",
            "upstream": f"{upstream_host}:{upstream_port}",
            "enabled": True,
        }
        created = self.request("POST", "/proxies", body)
        return int(created["listen"].rpartition(":")[2])

    def remove_link(self, name: str) -> None:
        self.request("DELETE", f"/proxies/{name}")

    def links(self) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = self.request("GET", "/proxies")
        return result

    def set_enabled(self, name: str, enabled: bool) -> None:
        self.request("POST", f"/proxies/{name}", {"enabled": enabled})

    def add_toxic(self, link: str, toxic: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/proxies/{link}/toxics", toxic)
        return result

    def update_toxic(self, link: str, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", f"/proxies/{link}/toxics/{name}", changes)
        return result

    def remove_toxic(self, link: str, name: str) -> None:
        self.request("DELETE", f"/proxies/{link}/toxics/{name}")

    def toxics(self, link: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", f"/proxies/{link}/toxics")
        return result

    def reset(self) -> None:
        self.request("POST", "/reset")
