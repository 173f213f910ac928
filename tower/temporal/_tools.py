"""The activities of a worker's tools: one per tool of its agents' graphs, each bound to
what ``TowerPlugin(bind={...})`` gives its resource (tower/effects/_activity.py makes
each), or the start refused, naming every tool left unbound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tower.core.tools import Tool
from tower.effects._activity import UNBOUND, activity_for


def tool_activities(tools: Mapping[str, Tool], bind: Mapping[str, Any], served: Iterable[str],
                    users: Mapping[str, list[str]]) -> list[Callable[..., Any]]:
    """An activity for each of ``tools`` not ``served`` already, its resource from ``bind``.
    Raises ``WorkerMisconfigured`` naming every tool whose resource is not bound (and the
    agents' nodes that use it)."""
    from tower.temporal.plugin import WorkerMisconfigured

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
            "where the worker is made: TowerPlugin(bind={...}) (build_worker(..., bind=...)); "
            "a worker that serves no tools says so: TowerPlugin(tools=False)")
    return made
