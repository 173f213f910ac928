"""MCP tools as catalogue entries (``server.tool``), listed when the worker starts.

Trust is the deployment's, not the server's: a tool is destructive (gated) and not
idempotent unless the deployment's MCP file says otherwise, per tool (``read_only``,
``gate``) or by trusting the server's hints (``trust_hints``); an untrusted server's hints
can only make a tool stricter. A tool neither read-only nor idempotent gets the call's key
in ``_meta`` and is not retried after a timeout, unless the server honours the key.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic import BaseModel

from mcp import Client, StdioServerParameters
from tower.contract.wire import ToolSchema

from .config import McpDiscoveryError, ServerConfig, TenantMcp

# Where a non-idempotent call's key travels (MCP reserves ``_meta`` for such fields).
KEY_META = "tower/idempotency-key"
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class AnyArguments(BaseModel, extra="allow"):
    """MCP tools check arguments against their JSON Schema (``McpTool.check``)."""


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
    args: type[BaseModel] = AnyArguments  # validated by ``check`` instead
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
