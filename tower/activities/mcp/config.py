"""Which MCP servers a tenant's agents may use, and its per-tool policy.

The deployment's file (``TOWER_MCP_CONFIG``, default ``.tower/mcp.json``), read by the
worker and the CLI, never from a run::

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

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tower.contract.failures import Code, TowerError

DEFAULT_PATH = Path(".tower") / "mcp.json"
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


class McpConfigError(TowerError, ValueError):  # a ValueError: a setting's bad value
    """The MCP configuration is missing a secret, malformed, or names an unknown tenant."""

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


def config_path() -> Path:
    return Path(os.environ.get("TOWER_MCP_CONFIG") or DEFAULT_PATH)


def load(tenant: str, path: str | Path | None = None) -> TenantMcp:
    """The tenant's MCP servers and tool policy; none configured is an empty config."""
    file = Path(path) if path is not None else config_path()
    if not file.exists():
        if path is not None or os.environ.get("TOWER_MCP_CONFIG"):
            raise McpConfigError(f"{file}: no such MCP configuration file")
        return TenantMcp()
    try:
        config = McpConfig.model_validate(json.loads(file.read_text()))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise McpConfigError(f"{file}: {exc}") from None
    return config.tenants.get(tenant, TenantMcp())
