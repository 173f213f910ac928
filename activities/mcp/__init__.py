"""Model Context Protocol servers as tool sources (the official ``mcp`` SDK).

``config`` — which servers a tenant uses and its per-tool policy (the deployment's file);
``catalogue`` — their tools, listed at worker start, classified by their annotations;
``calls`` — one activity per tool; ``policy`` — the worker-start checks.
"""

from dataclasses import dataclass
from pathlib import Path

from .calls import McpToolBox
from .catalogue import KEY_META, McpDiscoveryError, McpTool, discover
from .config import McpConfigError, TenantMcp, load
from .policy import McpPolicyError, check_agents

__all__ = ["KEY_META", "McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpTool",
           "McpSources", "McpToolBox", "TenantMcp", "check_agents", "discover", "load",
           "load_sources"]


@dataclass(frozen=True)
class McpSources:
    """A tenant's MCP configuration and the tools its servers listed."""

    tenant: TenantMcp
    tools: dict[str, McpTool]

    def toolbox(self) -> McpToolBox:
        return McpToolBox(self.tenant, self.tools)


async def load_sources(tenant: str, path: str | Path | None = None) -> McpSources:
    """Read the tenant's MCP configuration and list its servers' tools (worker start)."""
    config = load(tenant, path)
    return McpSources(config, await discover(config))
