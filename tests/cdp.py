"""Headless Chromium driven over the DevTools protocol (CDP), for the `browser` tests.

Why CDP over aiohttp's WebSocket client and not a WebDriver: aiohttp is already a dependency, CDP sees
every network request (`Network.requestWillBeSent`), console message and uncaught exception, and drives
real mouse events — no second package, no chromedriver version to match.

Chromium is the OS package (`/usr/bin/chromium`; `.ci/run` → `make test` installs it when missing), with
the flags known to work on these machines: headless, no sandbox (root), no GPU, no QUIC, no first-run,
no background networking, component updates or sync, a fresh profile per browser. Debugging listens
on 127.0.0.1 only (port 0: the browser picks a free port and writes it to DevToolsActivePort).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0")


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One tab: `call` sends a command and waits for its answer; every event is kept in `events`."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._next = 0
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._waiting:
                self._waiting.pop(data["id"]).set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def call(self, method: str, wait_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next += 1
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next] = fut
        await self.ws.send_str(json.dumps({"id": self._next, "method": method, "params": params}))
        answer = await asyncio.wait_for(fut, wait_s)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def js(self, expression: str, wait_s: float = 30.0) -> Any:
        """Evaluate in the page (promises awaited); the value, or an AssertionError with the exception."""
        res = await self.call("Runtime.evaluate", wait_s=wait_s, expression=expression, awaitPromise=True,
                              returnByValue=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    async def wait_for(self, expression: str, wait_s: float = 30.0) -> Any:
        deadline = time.monotonic() + wait_s
        while True:
            value = await self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression!r}")
            await asyncio.sleep(0.1)

    async def open(self, url: str, width: int = 1280, height: int = 1600) -> None:
        for domain in ("Page", "Runtime", "Log", "Network"):
            await self.call(f"{domain}.enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                        mobile=False)
        await self.call("Page.navigate", url=url)
        await self.wait_for("document.readyState === 'complete'")

    async def hover(self, x: float, y: float) -> None:
        await self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    async def screenshot(self, path: Path, full_page: bool = True) -> Path:
        res = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(res["data"]))
        return path

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error-level log entries (CSP violations land here)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails']}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def _launch(profile: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start Chromium on a fresh profile and wait (≤ 60 s) for the port it wrote to DevToolsActivePort."""
    exe = chromium_path()
    assert exe, "chromium is not installed (make test installs the Debian package chromium when missing)"
    profile.mkdir(parents=True, exist_ok=True)
    log_path = profile / "chromium.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not (port_file.is_file() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill(proc)
            raise AssertionError(f"chromium did not open its debugging port: {log_path.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, int(port_file.read_text().split()[0])


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 9)
    proc.wait(timeout=30)


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[Page]:
    """A headless Chromium with a fresh profile dir; yields its first tab. Killed (and waited) on exit."""
    proc, port = await asyncio.to_thread(_launch, profile)
    session = aiohttp.ClientSession()
    try:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        target = next(t for t in targets if t.get("type") == "page")
        ws = await session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=64 << 20)
        page = Page(ws)
        try:
            yield page
        finally:
            await page.close()
    finally:
        await session.close()
        await asyncio.to_thread(_kill, proc)
