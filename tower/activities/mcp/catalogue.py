"""MCP tools as catalogue entries (``server.tool``), listed when the worker starts, and
each tool's call as one activity.

Trust is the deployment's, not the server's: a tool is destructive (gated) and not
idempotent unless the deployment's MCP file says otherwise, per tool (``read_only``,
``gate``) or by trusting the server's hints (``trust_hints``); an untrusted server's hints
can only make a tool stricter. A tool neither read-only nor idempotent gets the call's key
in ``_meta`` and is not retried after a timeout, unless the server honours the key.

A call's arguments are checked against the tool's schema before, its result checked and
bounded before it enters the history. A server not reached (nothing sent) is retried. A
failure after the request went out is retried only where a repeat cannot act twice
(read-only or idempotent tools, or a server honouring the key); otherwise
``McpOutcomeUnknown``, final. The tool's own error (``isError``) is a result the node
hands to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import jsonschema
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from mcp import Client, MCPError, StdioServerParameters
from mcp.types import RequestParamsMeta
from tower.contract.failures import Code, TowerError, failure
from tower.contract.wire import ToolCall, ToolSchema

from . import McpDiscoveryError, ServerConfig, TenantMcp

# Where a non-idempotent call's key travels (MCP reserves ``_meta`` for such fields).
KEY_META = "tower/idempotency-key"
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class McpTool:
    """One MCP tool as Tower's catalogue knows it."""

    name: str  # server.tool
    server: str
    remote: str  # the tool's own name on its server
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    destructive: bool
    idempotent: bool
    gated: bool  # a node calling it needs an approval gate
    trusted_hints: bool  # the deployment trusts the server's annotations
    retry_after_timeout: bool
    timeout_seconds: float
    args: type[BaseModel] = BaseModel  # unused: ``check`` validates by the JSON Schema
    # Tower's reconciled effects are its own store's (fenced, read back by key); an MCP
    # server's effects are kept at most once by the key in ``_meta`` and by never
    # retrying a call that may have acted (McpToolBox), not by a reconcile call.
    side_effect: bool = False
    attempts: int = 5

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description,
                          parameters=self.input_schema)

    def check(self, arguments: dict[str, Any]) -> str | None:
        """Why ``arguments`` do not fit the tool's input schema, or None."""
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(self.input_schema).iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        return f"{where}: {error.message}"

    @property
    def source(self) -> str:
        return f"mcp:{self.server}"


def classify(server: str, tool: Any, tenant: TenantMcp, timeout: float) -> McpTool:
    """A listed ``Tool`` as a catalogue entry: the deployment's word first, the server's
    hints only where trusted or stricter."""
    name = f"{server}.{tool.name}"
    hints = tool.annotations
    trust = tenant.servers[server].trust_hints
    policy = tenant.tools.get(name)
    read_only = trust and bool(hints and hints.read_only_hint)
    if policy is not None and policy.read_only is not None:
        read_only = policy.read_only
    if hints is not None and (hints.read_only_hint is False or hints.destructive_hint):
        read_only = False  # the server says it writes: stricter, so taken from anyone
    destructive = not read_only and not (trust and hints is not None
                                         and hints.destructive_hint is False)
    idempotent = read_only or (trust and bool(hints and hints.idempotent_hint))
    gated = destructive if policy is None or policy.gate is None else policy.gate
    honours = bool(policy and policy.honours_idempotency_key)
    return McpTool(
        name=name, server=server, remote=tool.name,
        description=(tool.description or tool.title or tool.name)[:1024],
        input_schema=dict(tool.input_schema or {"type": "object"}),
        read_only=read_only, destructive=destructive, idempotent=idempotent,
        gated=gated, trusted_hints=trust, retry_after_timeout=idempotent or honours,
        timeout_seconds=timeout)


@asynccontextmanager
async def connect(config: ServerConfig) -> AsyncIterator[Client]:
    """A client session to one configured server (stdio child process or HTTP)."""
    server: Any
    if config.url:
        import httpx2  # the MCP SDK's HTTP client

        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers=config.header_values(),
                                  timeout=httpx2.Timeout(config.timeout_seconds))
        server = streamable_http_client(config.url, http_client=http)
    else:
        program, *args = config.command
        server = StdioServerParameters(command=program, args=args, env=config.env or None,
                                       cwd=config.cwd)
    async with Client(server, read_timeout_seconds=config.timeout_seconds, cache=None) as client:
        yield client


async def discover(tenant: TenantMcp) -> dict[str, McpTool]:
    """List every configured server's tools (at worker start, outside workflow code)."""
    tools: dict[str, McpTool] = {}
    for server, config in tenant.servers.items():
        try:
            async with connect(config) as client:
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    for tool in page.tools:
                        if not TOOL_NAME.match(tool.name):
                            raise McpDiscoveryError(
                                f"MCP server {server!r} lists a tool named {tool.name!r}: "
                                "not a valid tool name")
                        entry = classify(server, tool, tenant, config.timeout_seconds)
                        tools[entry.name] = entry
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except McpDiscoveryError:
            raise
        except Exception as exc:  # any transport or protocol failure: name the server
            raise McpDiscoveryError(
                f"MCP server {server!r} could not be listed: {_describe(exc)}") from exc
    for name in tenant.tools:
        if name not in tools:
            raise McpDiscoveryError(f"the MCP policy names {name!r}, which its server does not "
                                    "list")
    return tools


def _describe(exc: BaseException) -> str:
    # anyio wraps failures of the transport's task group: say what actually failed.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


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
        meta = (None if tool.idempotent
                else cast(RequestParamsMeta, {KEY_META: call.idempotency_key}))
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
