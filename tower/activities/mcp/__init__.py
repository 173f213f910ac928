"""Model Context Protocol servers as tool sources (the official ``mcp`` SDK).

Here, without the SDK: which servers a tenant's agents may use and its per-tool policy
(the deployment's file, ``TOWER_MCP_CONFIG``, default ``.tower/mcp.json``, read by the
worker and the CLI, never from a run), and the worker-start checks: every ``server.tool``
an agent names exists, and every gated one is called only behind an approval gate (a
failed check stops the worker with the reason: no run starts against a tool set it cannot
honour). ``catalogue``, with the SDK, imported only for a tenant whose configuration lists
servers: their tools, listed at worker start, and one activity per tool. The file::

    {"tenants": {"default": {
        "servers": {
            "notes": {"command": ["python", "-m", "notes_server"], "trust_hints": true},
            "kb": {"url": "https://kb.internal/mcp",
                   "headers": {"Authorization": "KB_AUTH"}}},
        "tools": {"notes.delete_note": {"gate": false, "honours_idempotency_key": true},
                  "kb.search": {"read_only": true}}}}}

``headers`` names the environment variable holding each value: the file holds no secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tower.contract.failures import Code, TowerError
from tower.core.tools import register_external

if TYPE_CHECKING:  # the catalogue imports the MCP SDK
    from .catalogue import McpTool

__all__ = ["McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources", "TenantMcp",
           "check_agents", "load", "load_sources"]

DEFAULT_PATH = Path(".tower") / "mcp.json"
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class McpConfigError(TowerError, ValueError):  # a ValueError: a setting's bad value
    """The MCP configuration is missing a secret, malformed, or names an unknown tenant."""

    CODE = Code.BAD_SETTINGS


class McpPolicyError(TowerError, ValueError):  # a ValueError: a setting's bad value
    """An agent names an MCP tool that is not there, or calls a gated one ungated."""

    CODE = Code.BAD_SETTINGS


# Raised by the catalogue, defined here: catching it must not import the MCP SDK.
class McpDiscoveryError(TowerError):
    """A configured MCP server could not be reached or listed."""

    CODE = Code.MCP_UNREACHABLE


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(default_factory=list, description="stdio: the program and args")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra environment")
    cwd: str | None = None
    url: str | None = Field(default=None, description="streamable HTTP endpoint")
    headers: dict[str, str] = Field(default_factory=dict,
                                    description="header -> env var holding its value")
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    trust_hints: bool = Field(
        default=False, description="take the server's own tool annotations (readOnlyHint, "
        "destructiveHint, idempotentHint) as true; otherwise they can only make a tool "
        "stricter")

    @model_validator(mode="after")
    def one_transport(self) -> ServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError("give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http(s): {self.url!r}")
        return self

    def header_values(self) -> dict[str, str]:
        """The headers with their secrets filled from the environment."""
        missing = [var for var in self.headers.values() if not os.environ.get(var)]
        if missing:
            raise McpConfigError(f"secret(s) {', '.join(missing)} not set in the environment")
        return {header: os.environ[var] for header, var in self.headers.items()}


class ToolPolicy(BaseModel):
    """An explicit override of what the tool's annotations would decide."""

    model_config = ConfigDict(extra="forbid")

    gate: bool | None = Field(default=None, description="require an approval gate (or not)")
    read_only: bool | None = Field(
        default=None, description="the deployment's word that the tool only reads (called "
        "freely, retried like any read), or that it does not; a server's hint that it writes "
        "still wins")
    honours_idempotency_key: bool = Field(
        default=False, description="the server deduplicates by the _meta key: a non-idempotent "
        "call may be retried after a timeout")


class TenantMcp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: dict[str, ServerConfig] = Field(default_factory=dict)
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)

    @model_validator(mode="after")
    def names(self) -> TenantMcp:
        for name in self.servers:
            if not NAME.match(name):
                raise ValueError(f"server name {name!r}: lowercase letters, digits, - and _")
        for tool in self.tools:
            if tool.split(".", 1)[0] not in self.servers:
                raise ValueError(f"policy for {tool!r} names no configured server")
        return self


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenants: dict[str, TenantMcp] = Field(default_factory=dict)


def load(tenant: str, path: str | Path | None = None) -> TenantMcp:
    """The tenant's MCP servers and tool policy; none configured is an empty config."""
    named = os.environ.get("TOWER_MCP_CONFIG")
    file = Path(path if path is not None else named or DEFAULT_PATH)
    if not file.exists():
        if path is not None or named:
            raise McpConfigError(f"{file}: no such MCP configuration file")
        return TenantMcp()
    try:
        config = McpConfig.model_validate_json(file.read_bytes())
    except ValidationError as exc:
        raise McpConfigError(f"{file}: {exc}") from None
    return config.tenants.get(tenant, TenantMcp())


def check_agents(machines: Iterable[Any], tools: dict[str, McpTool]) -> None:
    problems: list[str] = []
    for machine in machines:
        for node in machine.nodes.values():
            for name in node.tools:
                if "." not in name:
                    continue  # built-in: compile() checked it at import
                tool = tools.get(name)
                if tool is None:
                    known = ", ".join(sorted(tools)) or "none"
                    problems.append(f"agent {machine.name!r} node {node.name!r} names MCP tool "
                                    f"{name!r}, which no configured server lists (known: {known})")
                    continue
                gate = machine.gates.get(node.name)
                if tool.gated and (gate is None or gate.when != "before"):
                    why = ("the tenant's policy" if not tool.destructive
                           else "destructiveHint" if tool.trusted_hints
                           else "its server's hints are not trusted: a write until the "
                                "deployment says otherwise")
                    problems.append(
                        f"agent {machine.name!r} node {node.name!r} calls {name!r}, which needs "
                        f"an approval gate before it ({why}); add .gate({node.name!r}, Gate(...)) "
                        f"or set \"{name}\": {{\"gate\": false}} in the tenant's MCP policy"
                        + ("" if tool.trusted_hints else
                           " (or {\"read_only\": true} if it only reads)"))
    if problems:
        raise McpPolicyError("; ".join(problems))


@dataclass(frozen=True)
class McpSources:
    """A tenant's MCP configuration and the tools its servers listed."""

    tenant: TenantMcp
    tools: dict[str, McpTool]

    def activities_for(self, agents: Iterable[type]) -> list[Callable[..., Any]]:
        """The activities for these tools on a worker hosting ``agents``, once every
        ``server.tool`` they name is listed and every destructive one gated (McpPolicyError)."""
        check_agents((a.machine for a in agents if hasattr(a, "machine")), self.tools)
        register_external(self.tools)
        if not self.tools:
            return []
        from .catalogue import McpToolBox  # the SDK: only for a tenant that lists tools

        return McpToolBox(self.tenant, self.tools).activities()


async def load_sources(tenant: str, path: str | Path | None = None) -> McpSources:
    """Read the tenant's MCP configuration and list its servers' tools (worker start)."""
    config = load(tenant, path)
    if not config.servers:  # no MCP servers: the SDK is not even imported
        return McpSources(config, {})
    from tower.extras import MissingExtra, require

    try:
        require("mcp", f"tenant {tenant!r}'s MCP servers")
    except MissingExtra as exc:
        raise McpConfigError(str(exc)) from None
    from .catalogue import discover

    return McpSources(config, await discover(config))
