"""The notes MCP server as the tests run it: over stdio (a child of whoever connects) or
over streamable HTTP on a loopback port, as a real process that can be killed."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tower.activities.mcp import TenantMcp

SERVER = Path(__file__).resolve().with_name("notes_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stdio_tenant(db: Path, *, trust_hints: bool = True, slow_delete: float = 0.0,
                 timeout: float = 30.0, tools: dict[str, Any] | None = None) -> TenantMcp:
    """The notes server over stdio. Its hints are trusted unless ``trust_hints=False``: the
    deployment vouches for its own test server (all but ``forget_note``'s are true)."""
    return TenantMcp.model_validate({
        "servers": {"notes": {"command": [sys.executable, str(SERVER), "--db", str(db),
                                          "--slow-delete", str(slow_delete)],
                              "trust_hints": trust_hints, "timeout_seconds": timeout}},
        "tools": tools or {}})


def http_tenant(url: str, secret_var: str = "NOTES_MCP_AUTH", *, trust_hints: bool = True,
                timeout: float = 30.0, tools: dict[str, Any] | None = None) -> TenantMcp:
    return TenantMcp.model_validate({
        "servers": {"notes": {"url": url, "headers": {"Authorization": secret_var},
                              "trust_hints": trust_hints, "timeout_seconds": timeout}},
        "tools": tools or {}})


class HttpNotesServer:
    """``python tests/mcp_notes/notes_server.py --port P --token T`` as a process."""

    def __init__(self, db: Path, token: str, slow_delete: float = 0.0) -> None:
        self.db, self.token, self.slow_delete = db, token, slow_delete
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> HttpNotesServer:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--db", str(self.db),
             "--port", str(self.port), "--token", self.token,
             "--slow-delete", str(self.slow_delete)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5):
                return self
            time.sleep(0.1)
        raise RuntimeError("the notes MCP server did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@contextlib.contextmanager
def http_server(db: Path, token: str, slow_delete: float = 0.0) -> Iterator[HttpNotesServer]:
    server = HttpNotesServer(db, token, slow_delete).start()
    try:
        yield server
    finally:
        server.kill()
