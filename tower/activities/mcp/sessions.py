"""Long-lived client sessions, one per MCP server a worker uses (a stdio server is a
process). Each is owned by its own task (the SDK's transports are anyio contexts, entered
and left in one task); a broken transport drops the session and the next call opens one.
"""

from __future__ import annotations

import asyncio
import contextlib

from mcp import Client

from .catalogue import connect
from .config import ServerConfig


class Session:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def client(self) -> Client:
        """The open session, opening one if there is none (raises if that fails)."""
        async with self._lock:
            if self._client is None:
                ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
                self._stop = asyncio.Event()
                self._owner = asyncio.create_task(self._own(ready, self._stop))
                self._client = await ready
            return self._client

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with connect(self.config) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # a transport that broke ends its session
            if not ready.done():
                ready.set_exception(exc)
        finally:
            if self._stop is stop:
                self._client = None

    def broken(self) -> None:
        """The transport failed under a call: the next call opens a new session."""
        self._client = None
        self._stop.set()

    async def close(self) -> None:
        self._stop.set()
        if self._owner is not None:
            with contextlib.suppress(BaseException):
                await self._owner
