"""Model Context Protocol servers as tool sources (the official ``mcp`` SDK).

``config``: a tenant's servers and per-tool policy; ``catalogue``: their tools, listed at
worker start; ``calls``: one activity per tool; here, the worker-start checks: every
``server.tool`` an agent names exists, and every gated one is called only behind an approval
gate (a failed check stops the worker with the reason: no run starts against a tool set it
cannot honour). The SDK is imported only for a tenant whose configuration lists servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tower.contract.failures import Code, TowerError
from tower.core.tools import register_external

from .config import McpConfigError, McpDiscoveryError, TenantMcp, load

if TYPE_CHECKING:  # the catalogue and calls import the MCP SDK
    from .calls import McpToolBox
    from .catalogue import McpTool

__all__ = ["McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources", "TenantMcp",
           "check_agents", "load", "load_sources"]


class McpPolicyError(TowerError, ValueError):  # a ValueError: a setting's bad value
    """An agent names an MCP tool that is not there, or calls a gated one ungated."""

    CODE = Code.BAD_SETTINGS


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
