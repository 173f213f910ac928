"""The tools a worker serves: one activity per tool of its agents' graphs, each bound to
what ``TowerPlugin(bind={...})`` gives its resource (tower/effects/_activity.py makes each),
or the start refused, naming every tool left unbound."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from tower.core.errors import InvalidGraph
from tower.core.tools import Tool
from tower.effects._activity import UNBOUND, activity_for
from tower.temporal.plugin import WorkerMisconfigured


def tool_activities(agents: Iterable[type], bind: Mapping[str, Any],
                    served: Iterable[str] = ()) -> list[Callable[..., Any]]:
    """An activity for each tool of ``agents`` not ``served`` already, its resource from
    ``bind``: what a worker serving the tools of agents hosted elsewhere registers (the
    plugin does it itself). ``WorkerMisconfigured`` names every tool left unbound."""
    tools, users = hosted_tools(agents)
    have, made, missing = set(served), [], []
    for name, tool in sorted(tools.items()):
        if name in have or tool.control:
            continue
        if tool.resource is not None and tool.resource not in bind:
            missing.append(f"{name!r} needs {tool.resource!r} (used by "
                           f"{', '.join(users.get(name, []))})")
            continue
        made.append(activity_for(tool, bind.get(tool.resource or "", UNBOUND)))
    if missing:
        raise WorkerMisconfigured(
            "this worker cannot run its agents' tools: " + "; ".join(missing) + ". Bind each "
            "where the worker is made: TowerPlugin(bind={...}) (build_worker(..., bind=...)), "
            "or serve it with an activity whose function has its name; a worker that serves "
            "no tools says so: TowerPlugin(tools=False)")
    return made


def hosted_tools(agents: Iterable[Any]) -> tuple[dict[str, Tool], dict[str, list[str]]]:
    """Every tool of the agents' graphs by name, and the "agent.node"s using each.
    InvalidGraph when two agents name different tools alike."""
    tools: dict[str, Tool] = {}
    users: dict[str, list[str]] = {}
    for machine in _machines(agents):
        for name, tool in machine.tools().items():
            if tools.setdefault(name, tool) is not tool:
                raise InvalidGraph(machine.name, f"its tool {name!r} is another object than "
                                                 "another hosted agent's tool of that name")
        for node in machine.nodes.values():
            for name in (*node.tools, *node.proposes):
                if name in tools:
                    users.setdefault(name, []).append(f"{machine.name}.{node.name}")
    return tools, users


def check_external_tools(agents: Iterable[Any], available: Collection[str]) -> None:
    """Every ``server.tool`` (MCP) an agent names must be ``available`` on this worker;
    InvalidGraph naming the agent, node and tool otherwise."""
    for machine in _machines(agents):
        for node in machine.nodes.values():
            for tool in node.tools:
                if "." in tool and tool not in available:
                    raise InvalidGraph(machine.name, f"node {node.name!r} names tool {tool!r}, "
                                                     "which no server on this worker provides")


def _machines(agents: Iterable[Any]) -> list[Any]:
    """The agents' machines (a plain Temporal workflow hosted beside them has none)."""
    return [cls.machine for cls in agents if getattr(cls, "machine", None) is not None]
