"""A real headless Chromium for tests that look at a page, driven over the DevTools protocol on a pipe.

``chromium --remote-debugging-pipe`` reads protocol commands from fd 3 and writes replies and
events to fd 4, each a JSON message ended by a NUL byte (the transport Puppeteer uses), so
no WebSocket client, driver binary or extra package is needed: the standard library talks to
it. Commands follow the Chrome DevTools Protocol (chromedevtools.github.io/devtools-protocol):
Target.createTarget/attachToTarget (flattened sessions), Page.navigate, Runtime.evaluate,
Page.captureScreenshot.

Debian's package is ``chromium`` (``apt-get install -y chromium``); ``CHROMIUM`` may name
another binary. ``find()`` says why a test must skip where there is none.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find() -> tuple[str | None, str]:
    """The Chromium binary, or None and why not (for ``pytest.skip``)."""
    named = os.environ.get("CHROMIUM")
    if named:
        return (named, "") if shutil.which(named) else (None, f"CHROMIUM={named} is not an executable")
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path, ""
    return None, ("no headless browser: install Debian's chromium (apt-get install -y chromium) "
                  "or set CHROMIUM=/path/to/chrome to run the browser tests")


def _above_4(fd: int) -> int:
    """``fd`` moved to a descriptor number of 10 or more (the original is closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class Page:
    """One tab of a headless Chromium: open a file, read the console, evaluate, take a screenshot."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.console: list[str] = []  # console errors, uncaught exceptions, CSP and load failures
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="preflight-chromium-")
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # The browser's ends go above fd 4 first: `3<&R 4>&W` must not overwrite one of them on the way.
        to_browser_read, from_browser_write = (_above_4(fd) for fd in (to_browser_read, from_browser_write))
        flags = ["--headless=new", "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
                 "--disable-gpu", "--disable-extensions", "--disable-background-networking", "--mute-audio",
                 f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "--hide-scrollbars"]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses root with its sandbox on
        # bash puts the pipe ends on fds 3 and 4, where --remote-debugging-pipe looks for them (dash's
        # redirections take single-digit descriptors only).
        self._process = subprocess.Popen(
            ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser_read} 4>&{from_browser_write}', binary, *flags,
             "about:blank"], pass_fds=(to_browser_read, from_browser_write),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_read)
        os.close(from_browser_write)
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def open(self, path: str) -> None:
        """Load ``path`` and wait for its load event."""
        self._events.clear()
        self.call("Page.navigate", url=f"file://{os.path.abspath(path)}")
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page.

        Raises:
            RuntimeError: the expression threw.
        """
        reply = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression!r} threw: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: str, width: int = 1280, max_height: int = 2400) -> tuple[int, int]:
        """A PNG of the page's top ``max_height`` px at ``width`` px; returns its (width, height)."""
        metrics = self.call("Page.getLayoutMetrics")
        height = min(max_height, int(metrics["cssContentSize"]["height"]))
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        with open(path, "wb") as stream:
            stream.write(base64.b64decode(shot["data"]))
        return width, height

    def close(self) -> None:
        try:
            self._call("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """A command to this tab; its result."""
        return self._call(method, session=self._session, **params)

    def _call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _wait_for(self, event: str) -> dict[str, Any]:
        while True:
            for index, seen in enumerate(self._events):
                if seen.get("method") == event:
                    return self._events.pop(index)
            self._read()

    def _read(self) -> dict[str, Any]:
        """The next message; events are kept, and console errors recorded, on the way."""
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, left))
            if not ready:
                raise TimeoutError(f"no answer from Chromium within {self.timeout_s:g}s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed its pipe (exit status {self._process.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message = json.loads(raw)
        if "method" in message:
            self._events.append(message)
            self._record(message)
        return message

    def _record(self, event: dict[str, Any]) -> None:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.console.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                              for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.console.append(f"{params['entry'].get('source')}: {params['entry'].get('text')}")
