"""Model Context Protocol servers as tool sources (the official ``mcp`` SDK).

``config``: a tenant's servers and per-tool policy; ``catalogue``: their tools, listed at
worker start; ``calls``: one activity per tool; ``policy``: the worker-start checks. The
SDK is imported only for a tenant whose configuration lists servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tower.core.tools import register_external

from .config import McpConfigError, McpDiscoveryError, TenantMcp, load
from .policy import McpPolicyError, check_agents

if TYPE_CHECKING:
    from .calls import McpToolBox
    from .catalogue import McpTool

__all__ = ["McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources", "TenantMcp",
           "check_agents", "load", "load_sources"]


@dataclass(frozen=True)
class McpSources:
    """A tenant's MCP configuration and the tools its servers listed."""

    tenant: TenantMcp
    tools: dict[str, McpTool]

    def toolbox(self) -> McpToolBox:
        from .calls import McpToolBox  # the SDK: only for a tenant that uses MCP

        return McpToolBox(self.tenant, self.tools)

    def activities_for(self, agents: Iterable[type]) -> list[Callable[..., Any]]:
        """The activities for these tools on a worker hosting ``agents``, once every
        ``server.tool`` they name is listed and every destructive one gated (McpPolicyError)."""
        check_agents((a.machine for a in agents if hasattr(a, "machine")), self.tools)
        register_external(self.tools)
        # The MCP SDK is imported only here, for a tenant that lists tools.
        return self.toolbox().activities() if self.tools else []


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
