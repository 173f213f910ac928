"""Drive Debian's headless Chromium over the DevTools protocol, for Web UI tests.

`--dump-dom` waits for the page to go quiet, which the Temporal Web UI never does
for a running workflow (it long-polls the history), so we talk to the browser
instead: navigate, poll the page's text, take a screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
         "--window-size=1400,1000", "--remote-debugging-port=0"]

TEXT_JS = """[document.body ? document.body.innerText : '',
  ...[...document.querySelectorAll('iframe')].map(f => {
    try { return f.contentDocument.body.innerText; } catch (e) { return ''; } })
].join('\\n')"""


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One Chromium process with a fresh profile, and its first page."""

    def __init__(self, profile: Path, executable: str) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # Debian's `chromium` is a wrapper script: stop its whole process group.
            start_new_session=True)
        port = _devtools_port(profile / "DevToolsActivePort", self._proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        self._connection = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20)
        self._ws = self._connection.__enter__()
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:  # skip events until our answer arrives
            reply = json.loads(self._ws.recv(timeout=30))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def text(self) -> str:
        """The page's visible text, with that of its same-origin frames (the Web UI
        renders Markdown metadata in an iframe)."""
        result = self.call("Runtime.evaluate", expression=TEXT_JS, returnByValue=True)
        return str(result.get("result", {}).get("value", ""))

    def wait_for_text(self, *needles: str, seconds: float = 60) -> str:
        """The page's text once it contains every needle; TimeoutError with the text if not."""
        deadline = time.monotonic() + seconds
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.5)
        raise TimeoutError(f"page never showed {needles!r}; it shows:\n{text[:3000]}")

    def click_text(self, label: str) -> None:
        """Click the first link or button whose text is exactly ``label``."""
        js = ("(() => { const el = [...document.querySelectorAll('a,button')]"
              f".find(e => e.innerText.trim() === {json.dumps(label)});"
              " if (!el) return false; el.click(); return true; })()")
        found = self.call("Runtime.evaluate", expression=js, returnByValue=True)
        if not found.get("result", {}).get("value"):
            raise LookupError(f"no link or button labelled {label!r}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if a promise)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def fill(self, selector: str, value: str) -> None:
        """Set the value of the form field matching ``selector``."""
        js = (f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
              f" if (!el) return false; el.value = {json.dumps(value)}; return true; }})()")
        if not self.evaluate(js):
            raise LookupError(f"no form field matches {selector!r}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        self._connection.__exit__(None, None, None)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()


def _devtools_port(port_file: Path, proc: subprocess.Popen[bytes], seconds: float = 30) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with code {proc.returncode}")
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().splitlines()[0])
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise RuntimeError("chromium did not open its DevTools port")


async def sync(fn: Any, *args: Any, **kw: Any) -> Any:
    # The inbox and the worker answer on the test's event loop: drive the browser from a thread.
    return await asyncio.to_thread(fn, *args, **kw)
