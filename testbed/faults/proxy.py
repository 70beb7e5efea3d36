"""The fault proxy: an asyncio TCP proxy with Toxiproxy-style toxics and HTTP API.

Kernel netem is absent and no toxiproxy binary can be installed here (docs/architecture.md,
"Platform facts"), so clients that should see network faults connect to a *link* of this proxy
instead of the broker. `FaultProxy` runs the event loop in a daemon thread behind a synchronous
facade; every call waits at most `call_timeout` seconds. Everything listens on 127.0.0.1 only.

    proxy = FaultProxy(seed=7).start()             # + HTTP API on proxy.api_url (api_port=0)
    port = proxy.add_link("consumers", "127.0.0.1", 5672)
    proxy.add_toxic("consumers", {"type": "latency", "stream": "downstream",
                                  "attributes": {"latency": 50, "jitter": 0}})
    proxy.set_enabled("consumers", False)           # partition: RST + refuse new connections
    proxy.reset()                                   # all toxics gone, every link enabled
    proxy.stop()

The toxics and their fields are documented in `testbed.faults.toxics`; the HTTP API (same
paths and JSON as Toxiproxy's) in `testbed.faults.api`. Run it as its own process with
``python -m testbed.faults.proxy --api-port 8474``.
"""

from __future__ import annotations

__all__ = ["FaultProxy", "ProxyCore", "main"]

import argparse
import asyncio
import inspect
import signal
import threading
from collections.abc import Callable
from typing import Any

from testbed.exceptions import FaultError
from testbed.faults.api import ApiServer
from testbed.faults.link import LOOPBACK, Link, listening_socket
from testbed.faults.precise_selector import precise_event_loop
from testbed.faults.toxic_spec import ConflictError, NotFoundError, ToxicError


class ProxyCore:
    """All links of one proxy; the object the facade and the HTTP API drive (loop side)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.links: dict[str, Link] = {}

    def link(self, name: str) -> Link:
        try:
            return self.links[name]
        except KeyError:
            raise NotFoundError(f"no link (proxy) named {name!r}") from None

    def add_link(
        self, name: str, upstream_host: str, upstream_port: int, listen_port: int = 0
    ) -> Link:
        if not name or not isinstance(name, str) or "/" in name:
            raise ToxicError(f"link name: must be a non-empty string without '/', got {name!r}")
        if name in self.links:
            raise ConflictError(f"link (proxy) {name!r} already exists")
        if type(upstream_port) is not int or not 0 < upstream_port < 65536:
            raise ToxicError(
                f"link {name!r}: upstream port must be 1..65535, got {upstream_port!r}"
            )
        if type(listen_port) is not int or not 0 <= listen_port < 65536:
            raise ToxicError(f"link {name!r}: listen port must be 0..65535, got {listen_port!r}")
        try:
            sock = listening_socket(listen_port)
        except OSError as exc:
            raise ConflictError(
                f"link {name!r}: cannot listen on {LOOPBACK}:{listen_port}: {exc}"
            ) from exc
        link = Link(name, upstream_host, upstream_port, sock, self.seed)
        link.start()
        self.links[name] = link
        return link

    def remove_link(self, name: str) -> None:
        self.link(name).close()
        del self.links[name]

    def reset(self) -> None:
        for link in self.links.values():
            link.reset()

    def close(self) -> None:
        for name in list(self.links):
            self.remove_link(name)


class FaultProxy:
    """Thread-hosted fault proxy. Methods may be called from any thread."""

    def __init__(
        self, *, seed: int = 0, api_port: int | None = 0, call_timeout: float = 10.0
    ) -> None:
        """`seed` drives every per-connection draw (toxicity, jitter, slicing, loss);
        `api_port` None: no HTTP API, 0: a free port."""
        self.seed = seed
        self.call_timeout = call_timeout
        self._api_port = api_port
        self._core = ProxyCore(seed)
        self._api: ApiServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FaultProxy:
        """Start the loop thread (and the HTTP API); returns self. Idempotent."""
        if self._thread is not None:
            return self
        loop = precise_event_loop()  # a toxic's timers fire on time, not up to 1 ms late
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="mqbed-fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(self.call_timeout):
            raise FaultError(f"fault proxy loop did not start within {self.call_timeout} s")
        if self._api_port is not None:
            api = ApiServer(self._core)
            self._call(api.start, self._api_port)
            self._api = api
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close every link and connection (RST), the API, and end the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._shutdown, timeout=timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._loop = self._thread = None

    async def _shutdown(self) -> None:
        if self._api is not None:
            await self._api.stop()
            self._api = None
        self._core.close()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:  # let cancelled connection tasks unwind
            await asyncio.wait(others, timeout=1.0)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def api_url(self) -> str | None:
        """``http://127.0.0.1:PORT`` of the HTTP API, or None when it is off."""
        return self._api.url if self._api is not None else None

    # ----------------------------------------------------------------- links

    def add_link(
        self, name: str, upstream_host: str, upstream_port: int, listen_port: int = 0
    ) -> int:
        """Listen on 127.0.0.1:`listen_port` (0 = free) forwarding to upstream; the port."""
        link = self._call(self._core.add_link, name, upstream_host, upstream_port, listen_port)
        return link.listen_port

    def remove_link(self, name: str) -> None:
        self._call(self._core.remove_link, name)

    def links(self) -> dict[str, dict[str, Any]]:
        """Toxiproxy's ``GET /proxies``: name → {name, listen, upstream, enabled, toxics}."""
        return self._call(lambda: {n: k.to_json() for n, k in self._core.links.items()})

    def port(self, name: str) -> int:
        return self._call(lambda: self._core.link(name).listen_port)

    def connections(self, name: str) -> int:
        """Open client connections of link `name`."""
        return self._call(lambda: len(self._core.link(name).conns))

    def set_enabled(self, name: str, enabled: bool) -> None:
        """``enabled=False`` is a partition: connections get a RST, new ones are refused."""
        self._call(lambda: self._core.link(name).set_enabled(enabled))

    # ----------------------------------------------------------------- toxics

    def add_toxic(self, link: str, toxic: dict[str, Any]) -> dict[str, Any]:
        """Add a toxic (Toxiproxy JSON: name, type, stream, toxicity, attributes); its JSON."""
        return self._call(lambda: self._core.link(link).add_toxic(toxic).to_json())

    def update_toxic(self, link: str, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a toxic's `toxicity` and/or `attributes`."""
        return self._call(lambda: self._core.link(link).update_toxic(name, changes).to_json())

    def remove_toxic(self, link: str, name: str) -> None:
        self._call(lambda: self._core.link(link).remove_toxic(name))

    def toxics(self, link: str) -> list[dict[str, Any]]:
        return self._call(lambda: [s.to_json() for s in self._core.link(link).specs.values()])

    def reset(self) -> None:
        """Remove every toxic and enable every link (Toxiproxy ``POST /reset``)."""
        self._call(self._core.reset)

    # ----------------------------------------------------------------- plumbing

    def _call(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """Run `fn(*args)` (plain or async) on the loop; wait ≤ `timeout` s for the result."""
        loop = self._loop
        if loop is None or not loop.is_running():
            raise FaultError("fault proxy is not running (call start())")

        async def invoke() -> Any:
            result = fn(*args)
            return await result if inspect.isawaitable(result) else result

        future = asyncio.run_coroutine_threadsafe(invoke(), loop)
        limit = self.call_timeout if timeout is None else timeout
        try:
            return future.result(limit)
        except TimeoutError as exc:
            future.cancel()
            raise FaultError(f"fault proxy call {fn!r} did not finish in {limit} s") from exc


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.faults.proxy``: the proxy and its HTTP API as a process of its own."""
    parser = argparse.ArgumentParser(
        prog="python -m testbed.faults.proxy",
        description="mqbed fault proxy: an asyncio TCP proxy with Toxiproxy's toxics and HTTP "
        "API (same paths and JSON), on 127.0.0.1 only. Add links and toxics through the API; "
        "toxics and fields: testbed/faults/toxics.py.",
    )
    parser.add_argument(
        "--api-port", type=int, default=8474, help="HTTP API port on 127.0.0.1 (0 = a free one)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random toxics (loss, jitter, slicer)"
    )
    args = parser.parse_args(argv)
    proxy = FaultProxy(seed=args.seed, api_port=args.api_port).start()
    print(f"mqbed fault proxy API on {proxy.api_url} (listening on {LOOPBACK} only)", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(1.0):
            if not proxy.running:
                return 1
    finally:
        proxy.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
