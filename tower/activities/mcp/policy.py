"""Checks at worker start: every ``server.tool`` an agent names exists, and every gated
one is called only behind an approval gate. A failed check stops the worker with the
reason: no run starts against a tool set it cannot honour.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tower.contract.failures import Code, TowerError

if TYPE_CHECKING:  # the catalogue imports the MCP SDK; these checks need only its type
    from .catalogue import McpTool


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
