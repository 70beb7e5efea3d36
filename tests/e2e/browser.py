"""A small headless-Chromium driver over the DevTools protocol (stdlib + websocket-client).

    with Chromium(tmp_path / "profile") as browser:
        page = browser.open(path_to_html)       # waits for the load event
        page.evaluate("document.title")
        page.screenshot(artifacts_dir / "x.png")
        page.errors                              # console errors, exceptions, failed loads

Chromium is started on 127.0.0.1 with ``--remote-debugging-port=0`` (it picks a free port and
writes it to ``DevToolsActivePort`` in the profile), in its own process group, and stopped by
that group at exit. Every wait is bounded. websocket-client comes with stomp.py.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
]


class Page:
    """One page target: send commands, collect events."""

    def __init__(self, ws_url: str, timeout: float):
        self.timeout = timeout
        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})  # type: ignore[no-any-return]
            self.events.append(msg)
        raise TimeoutError(f"no answer to {method} within {self.timeout}s")

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for msg in self.events:
            if msg.get("method") == method:
                return msg
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return msg
        raise TimeoutError(f"no {method} within {self.timeout}s")

    def navigate(self, url: str) -> None:
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.send(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    @property
    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (e.g. failed loads)."""
        out = []
        for msg in self.events:
            method, params = msg.get("method"), msg.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value")) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(params.get("exceptionDetails"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                entry = params["entry"]
                out.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return out

    def close(self) -> None:
        self.ws.close()


class Chromium:
    """A headless Chromium process with a private profile directory."""

    def __init__(self, profile: Path, timeout: float = 30.0):
        self.profile = Path(profile)
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.pages: list[Page] = []

    def __enter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = open(self.profile / "chromium.log", "wb")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"chromium exited with {self.proc.returncode}: "
                    + (self.profile / "chromium.log").read_text()[-2000:]
                )
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().split()[0])
                return self
            time.sleep(0.1)
        self.__exit__(None, None, None)
        raise TimeoutError(f"chromium did not open a DevTools port within {self.timeout}s")

    def _targets(self) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.port}/json/list"
        with urllib.request.urlopen(url, timeout=self.timeout) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def open(self, html: Path) -> Page:
        """Navigate the first page target to `html` and wait for its load event."""
        deadline = time.monotonic() + self.timeout
        targets: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not targets:
            targets = [t for t in self._targets() if t.get("type") == "page"]
            if not targets:
                time.sleep(0.1)
        if not targets:
            raise TimeoutError("chromium has no page target")
        page = Page(targets[0]["webSocketDebuggerUrl"], self.timeout)
        self.pages.append(page)
        page.navigate(Path(html).resolve().as_uri())
        return page

    def __exit__(self, *exc: object | TracebackType | None) -> None:
        for page in self.pages:
            try:
                page.close()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
