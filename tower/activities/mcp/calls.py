"""Each MCP tool call is one activity: arguments checked against the tool's schema
before, the result checked and bounded before it enters the history.

A server not reached (nothing sent) is retried. A failure after the request went out is
retried only where a repeat cannot act twice (read-only or idempotent tools, or a server
honouring the key); otherwise ``McpOutcomeUnknown``, final. The tool's own error
(``isError``) is a result the node hands to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

from mcp import Client, MCPError
from mcp.types import RequestParamsMeta
from tower.contract.failures import Code, TowerError, failure
from tower.contract.wire import ToolCall

from .catalogue import KEY_META, McpTool, _describe, connect
from .config import ServerConfig, TenantMcp

# Under Temporal's 2 MiB payload limit; results above the payload store's threshold
# (128 KiB) leave the history for the store, as every large payload does.
MAX_RESULT_BYTES = 1024 * 1024
CONNECT_TRIES = 4


class Session:
    """A long-lived client session to one MCP server (a stdio server is a process), owned
    by its own task (the SDK's transports are anyio contexts, entered and left in one task);
    a broken transport drops the session and the next call opens one."""

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


class McpToolBox:
    """Hosts every MCP tool of one tenant as its own activity, named ``server.tool``."""

    def __init__(self, tenant: TenantMcp, tools: dict[str, McpTool],
                 max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        self.tenant = tenant
        self.tools = tools
        self.max_result_bytes = max_result_bytes
        self._sessions: dict[str, Session] = {}

    def _session(self, server: str) -> Session:
        if server not in self._sessions:
            self._sessions[server] = Session(self.tenant.servers[server])
        return self._sessions[server]

    async def close(self) -> None:
        """End every open session (stdio servers exit with it)."""
        for session in self._sessions.values():
            await session.close()

    def activities(self) -> list[Callable[..., Any]]:
        return [self._activity(tool) for tool in self.tools.values()]

    def _activity(self, tool: McpTool) -> Callable[[ToolCall], Any]:
        async def run(call: ToolCall) -> dict[str, Any]:
            return await self.call(tool, call)

        # Activity names are part of the history's contract: the catalogue name, stable (the
        # function's, as the SDK and TowerPlugin name an activity).
        run.__name__ = run.__qualname__ = tool.name
        return activity.defn(run)

    async def call(self, tool: McpTool, call: ToolCall) -> dict[str, Any]:
        problem = tool.check(call.arguments)
        if problem is not None:
            raise failure(TowerError(f"bad arguments for {tool.name}: {problem}",
                                     code=Code.BAD_TOOL_ARGUMENTS))
        key = {KEY_META: call.idempotency_key}
        meta = None if tool.idempotent else cast(RequestParamsMeta, key)
        if not tool.retry_after_timeout and activity.in_activity() and activity.info().attempt > 1:
            # An earlier attempt timed out or broke after sending: it may have acted.
            raise failure(TowerError(
                f"{tool.name}: not retried — the tool is not idempotent and an earlier "
                f"attempt may have acted (idempotency key {call.idempotency_key!r})",
                code=Code.MCP_OUTCOME_UNKNOWN))
        session = self._session(tool.server)
        sent = False
        for attempt in range(CONNECT_TRIES):
            try:
                client = await session.client()
                sent = True
                result = await client.call_tool(tool.remote, call.arguments, meta=meta)
                break
            except MCPError as exc:
                raise self._failure(tool, call, f"protocol error {exc.code}: {exc}", sent) from None
            except Exception as exc:
                session.broken()
                if sent:
                    raise self._failure(tool, call, _describe(exc), sent) from None
                if attempt == CONNECT_TRIES - 1:
                    # Nothing was sent; a later attempt of a non-idempotent tool could not
                    # tell, so only the others are left to Temporal's retries.
                    raise failure(TowerError(
                        f"MCP server {tool.server!r} unreachable: {_describe(exc)}",
                        code=Code.MCP_UNREACHABLE,
                        retryable=tool.retry_after_timeout)) from None
                await asyncio.sleep(0.5 * 2 ** attempt)
        return self._result(tool, result)

    def _failure(self, tool: McpTool, call: ToolCall, what: str, sent: bool) -> ApplicationError:
        if tool.retry_after_timeout or not sent:
            return failure(TowerError(f"{tool.name}: {what}", code=Code.MCP_TRANSPORT_ERROR))
        return failure(TowerError(
            f"{tool.name}: {what}; not retried: the tool is not idempotent and the call may "
            f"have acted (its idempotency key {call.idempotency_key!r} was sent in _meta)",
            code=Code.MCP_OUTCOME_UNKNOWN))

    def _result(self, tool: McpTool, result: Any) -> dict[str, Any]:
        text = "\n".join(getattr(block, "text", "") for block in result.content
                         if getattr(block, "type", "") == "text")
        if result.is_error:
            return {"is_error": True, "content": text[:4000] or f"{tool.name} failed"}
        # The SDK's call_tool has checked structured content against the tool's output schema.
        out = ({"content": text} if result.structured_content is None
               else dict(result.structured_content))
        size = len(json.dumps(out).encode())
        if size > self.max_result_bytes:
            return {"is_error": True, "content": f"{tool.name} returned {size} bytes, over the "
                    f"limit of {self.max_result_bytes}: ask for less"}
        return out
