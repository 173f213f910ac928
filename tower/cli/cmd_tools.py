"""`tower tools`: every tool a tenant's agents can use, built in or from an MCP server."""

from __future__ import annotations

from typing import Any

import click

from tower.cli.output import json_option, print_json, table, tenant_option


@click.command("tools", help=(
    "List every tool the tenant's agents can use: built-in tools and the tools of the MCP "
    "servers in the tenant's MCP configuration (TOWER_MCP_CONFIG, default .tower/mcp.json), "
    "with their annotations, whether calls to them are gated, and the agent nodes that use "
    "them. Lists the MCP servers' tools by connecting to them, as a worker does at start."))
@json_option("print the tools as JSON")
@tenant_option
async def command(as_json: bool) -> int:
    from tower.activities.mcp import load_sources
    from tower.cli.agents import agents
    from tower.client.connection import connect_config

    tenant = connect_config().get("namespace") or "default"
    mcp = await load_sources(tenant)
    users = used_by(agents().values())
    rows: list[dict[str, Any]] = [
        {"tool": name, "source": "built-in", "kind": "side effect" if tool.side_effect else "read",
         "gated": gated_in(name, users), "used_by": users.get(name, [])}
        for name, tool in sorted(built_in(agents().values()).items())]
    for name, mcp_tool in sorted(mcp.tools.items()):
        kind = ("read-only" if mcp_tool.read_only else "destructive" if mcp_tool.destructive
                else "idempotent write" if mcp_tool.idempotent else "write")
        rows.append({"tool": name, "source": mcp_tool.source, "kind": kind,
                     "gated": "required" if mcp_tool.gated else "no",
                     "used_by": users.get(name, []),
                     "retried_after_timeout": mcp_tool.retry_after_timeout,
                     "hints": "trusted" if mcp_tool.trusted_hints else "not trusted"})
    if as_json:
        print_json({"tenant": tenant, "tools": rows})
        return 0
    table(["tool", "source", "kind", "gated", "used by"],
          [[r["tool"], r["source"], r["kind"], r["gated"], ", ".join(r["used_by"]) or "-"]
           for r in rows], empty="(no tools)")
    return 0


def built_in(agents: Any) -> dict[str, Any]:
    """The project's own tools its agents' nodes use (control tools left out)."""
    return {name: spec for cls in agents for node in cls.machine.nodes.values()
            for name, spec in node.specs.items() if not getattr(spec, "control", False)}


def used_by(agents: Any) -> dict[str, list[str]]:
    """tool -> ["agent:node", ...] ("agent:node (gated)" where a gate holds the node)."""
    found: dict[str, list[str]] = {}
    for cls in agents:
        machine = cls.machine
        for node in machine.nodes.values():
            gate = machine.gates.get(node.name)
            mark = " (gated)" if gate is not None and gate.when == "before" else ""
            for tool in node.tools:
                found.setdefault(tool, []).append(f"{machine.name}:{node.name}{mark}")
    return found


def gated_in(tool: str, users: dict[str, list[str]]) -> str:
    uses = users.get(tool, [])
    gated = [u for u in uses if u.endswith("(gated)")]
    if not gated:
        return "no"
    return "always" if len(gated) == len(uses) else "in some nodes"
