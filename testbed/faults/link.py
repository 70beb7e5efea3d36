"""Links (Toxiproxy's "proxies"): a listener on 127.0.0.1, its upstream and its toxics.

Runs on the proxy's event loop; nothing is thread-safe. Every accepted connection becomes a
`Connection` (see `testbed.faults.pipe`) to the link's upstream, with the link's toxics.

A link that refuses (disabled, or a ``down`` toxic with mode ``refuse``) resets its connections
and stops accepting: the listening socket is disconnected (``connect(AF_UNSPEC)``, Linux) so that
new connections get ECONNREFUSED while the port stays ours; it listens again when healed (on
other systems the socket is closed and bound again).
"""

from __future__ import annotations

__all__ = ["Link", "LOOPBACK", "listening_socket"]

import asyncio
import ctypes
import random
import socket
from typing import Any

from testbed.faults.pipe import Connection
from testbed.faults.toxic_spec import (
    ConflictError,
    NotFoundError,
    ToxicError,
    ToxicSpec,
    parse_toxic,
)

LOOPBACK = "127.0.0.1"


class _SockAddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_char * 14)]


def _unlisten(sock: socket.socket) -> bool:
    """Stop a listening TCP socket accepting while it keeps its port (Linux: AF_UNSPEC)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        addr = _SockAddr(socket.AF_UNSPEC)
        return int(libc.connect(sock.fileno(), ctypes.byref(addr), ctypes.sizeof(addr))) == 0
    except (OSError, AttributeError):
        return False


def listening_socket(port: int) -> socket.socket:
    """A non-blocking socket bound to 127.0.0.1:`port` (0 → a free port, bound explicitly so
    that it survives `_unlisten`)."""
    if port == 0:
        with socket.socket() as probe:
            probe.bind((LOOPBACK, 0))
            port = probe.getsockname()[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(256)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Link:
    """A named listener on 127.0.0.1 forwarding to one upstream, with its toxics."""

    def __init__(
        self, name: str, upstream_host: str, upstream_port: int, sock: socket.socket, seed: int
    ) -> None:
        self.name = name
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.sock: socket.socket | None = sock
        self.listen_port: int = sock.getsockname()[1]
        self.seed = seed
        self.enabled = True
        self.specs: dict[str, ToxicSpec] = {}
        self.conns: set[Connection] = set()
        self.accepted = 0
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def refusing(self) -> bool:
        return not self.enabled or any(s.refuses for s in self.specs.values())

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._accepting = loop.create_task(self._accept_loop(), name=f"accept-{self.name}")

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            assert self.sock is not None
            csock, _ = await loop.sock_accept(self.sock)
            self.accepted += 1
            task = loop.create_task(self._serve(csock, self.accepted))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, csock: socket.socket, seq: int) -> None:
        try:
            client = await asyncio.open_connection(sock=csock)
        except OSError:
            csock.close()
            return
        conn = Connection(self, seq, client, random.Random(f"{self.seed}:{self.name}:{seq}"))
        self.conns.add(conn)
        try:
            await conn.run()
        finally:
            self.conns.discard(conn)

    def _apply_refusal(self) -> None:
        """Stop or resume accepting after a change of `refusing`."""
        listening = self._accepting is not None
        if self.refusing and listening:
            assert self._accepting is not None
            self._accepting.cancel()
            self._accepting = None
            if self.sock is not None and not _unlisten(self.sock):
                self.sock.close()  # fallback: give the port up until healed
                self.sock = None
            for conn in list(self.conns):
                conn.reset(f"link {self.name} refuses connections")
        elif not self.refusing and not listening:
            if self.sock is None:
                self.sock = listening_socket(self.listen_port)
            else:
                self.sock.listen(256)
            self.start()

    # ----------------------------------------------------------------- toxics

    def add_toxic(self, data: dict[str, Any]) -> ToxicSpec:
        spec = parse_toxic(data, where=f"proxies/{self.name}/toxics")
        if spec.name in self.specs:
            raise ConflictError(f"link {self.name!r}: toxic {spec.name!r} already exists")
        self.specs[spec.name] = spec
        if spec.refuses:
            self._apply_refusal()
        else:
            for conn in list(self.conns):
                conn.add_toxic(spec)
        return spec

    def toxic(self, name: str) -> ToxicSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise NotFoundError(f"link {self.name!r}: no toxic {name!r}") from None

    def update_toxic(self, name: str, data: dict[str, Any]) -> ToxicSpec:
        """Change `toxicity`/`attributes` of a toxic (it is re-applied to every connection)."""
        old = self.toxic(name)
        if set(data) - {"toxicity", "attributes", "name", "type", "stream"}:
            parse_toxic(data, where=f"proxies/{self.name}/toxics/{name}")  # names the bad key
        for key in ("name", "type", "stream"):
            if key in data and data[key] != getattr(old, key):
                raise ToxicError(f"proxies/{self.name}/toxics/{name}.{key}: cannot be changed")
        merged = old.to_json()
        merged["toxicity"] = data.get("toxicity", old.toxicity)
        merged["attributes"] = {**old.attributes, **(data.get("attributes") or {})}
        parse_toxic(merged, where=f"proxies/{self.name}/toxics/{name}")
        self.remove_toxic(name)
        return self.add_toxic(merged)

    def remove_toxic(self, name: str) -> None:
        spec = self.toxic(name)
        del self.specs[name]
        for conn in list(self.conns):
            conn.remove_toxic(name)
        if spec.refuses:
            self._apply_refusal()

    def set_enabled(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self._apply_refusal()

    def reset(self) -> None:
        for name in list(self.specs):
            self.remove_toxic(name)
        self.set_enabled(True)

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        for conn in list(self.conns):
            conn.reset(f"link {self.name} removed")
        for task in list(self._tasks):
            task.cancel()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": f"{LOOPBACK}:{self.listen_port}",
            "upstream": f"{self.upstream_host}:{self.upstream_port}",
            "enabled": self.enabled,
            "toxics": [s.to_json() for s in self.specs.values()],
            "connections": len(self.conns),
        }
