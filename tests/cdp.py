"""A headless Chromium driven through the DevTools protocol, for tests that need a real browser.

Only what the dashboard tests use: open a page, evaluate JavaScript, collect the console's
errors and the page's websockets, take a screenshot. The protocol travels over tornado's
websocket client (a dependency of distributed), so nothing is installed for it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from tornado.websocket import websocket_connect

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    """The first headless-capable browser on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@contextlib.contextmanager
def started(executable: str, timeout: float = 30):
    """A headless browser on a free DevTools port; yields that port's HTTP base URL."""
    profile = Path(tempfile.mkdtemp(prefix="hpcgpu-chromium-"))
    argv = [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        active, deadline = profile / "DevToolsActivePort", time.monotonic() + timeout
        while not (active.exists() and active.read_text().count("\n") >= 1):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{executable} did not start: {process.stderr.read()[-2000:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{active.read_text().split()[0]}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


class Page:
    """One page target: send commands, keep every event it reports."""

    def __init__(self, connection):
        self.connection, self.events, self._next, self._waiting = connection, [], 0, {}
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, devtools: str) -> "Page":
        with urllib.request.urlopen(devtools + "/json/list", timeout=10) as response:
            target = next(t for t in json.load(response) if t["type"] == "page")
        page = cls(await websocket_connect(target["webSocketDebuggerUrl"], max_message_size=64 << 20))
        for domain in ("Page", "Runtime", "Log", "Network"):
            await page.send(f"{domain}.enable")
        return page

    async def _read(self):
        while (message := await self.connection.read_message()) is not None:
            data = json.loads(message)
            if "id" in data:
                self._waiting.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def send(self, method: str, **params) -> dict:
        self._next += 1
        answer = self._waiting[self._next] = asyncio.get_running_loop().create_future()
        self.connection.write_message(json.dumps({"id": self._next, "method": method, "params": params}))
        data = await asyncio.wait_for(answer, 30)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data["result"]

    async def evaluate(self, expression: str):
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float):
        """Poll ``expression`` until it is truthy; its last value (falsy after ``timeout``)."""
        deadline, value = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if value := await self.evaluate(expression):
                break
            await asyncio.sleep(0.2)
        return value

    def errors(self) -> list[str]:
        """The console's errors and the page's uncaught exceptions so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"{params['entry'].get('url', '')}: {params['entry']['text']}")
        return found

    def websockets(self) -> dict[str, dict]:
        """Each websocket the page opened: its URL, frames received, whether it closed or failed."""
        sockets: dict[str, dict] = {}
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Network.webSocketCreated":
                sockets[params["requestId"]] = {"url": params["url"], "received": 0, "closed": False, "error": None}
            elif (socket := sockets.get(params.get("requestId"))) is not None:
                if method == "Network.webSocketFrameReceived":
                    socket["received"] += 1
                elif method == "Network.webSocketClosed":
                    socket["closed"] = True
                elif method == "Network.webSocketFrameError":
                    socket["error"] = params.get("errorMessage")
        return sockets

    async def screenshot(self, path: Path) -> Path:
        data = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self):
        self.connection.close()
        self._reader.cancel()
