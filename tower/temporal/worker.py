"""``build_worker``: the one way to make a worker for a project's agents.

    from tower.temporal import build_worker
    worker = build_worker(client, task_queue="my-agents", agents=[MyAgent],
                          bind={"db": SQLite(".tower/payments.sqlite")})

It is a ``Worker`` with ``TowerPlugin`` (tower.temporal.plugin): Tower's converter, sandbox
and own activities, and an activity for every ``@tool`` the agents' graphs use, each tool's
resource taken from ``bind`` (the parameter's name -> what it gets). A tool whose resource
is not bound refuses the start, naming it; ``tools=False`` makes a worker that serves no
tools (its agents' tools run on other workers). A client connected with ``TowerPlugin``
(``tower.client.connect()``'s) keeps its converter; this worker's plugin takes the place of
the client's. The engine never imports a project's packages: the agents come in here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Worker

from tower.core.tools import ToolSpec
from tower.effects._activity import activity_for, effect_of
from tower.temporal._tools import tool_activities as _made
from tower.temporal.converter import pydantic_converter
from tower.temporal.plugin import (
    WORKFLOW_FAILURE_TYPES,
    TowerPlugin,
    check_external_tools,
    has_tower_plugin,
    hosted_tools,
    sandbox_runner,
)

if TYPE_CHECKING:
    from tower.activities.own import WorkerSettings

__all__ = ["WORKFLOW_FAILURE_TYPES", "activity_for", "build_worker", "check_external_tools",
           "effect_of", "pydantic_converter", "sandbox_runner", "tool_activities"]


def build_worker(
    client: Client, *, task_queue: str, agents: Sequence[type],
    bind: Mapping[str, Any] | None = None, tools: bool = True,
    activities: Sequence[Callable[..., Any]] = (),
    external_tools: Mapping[str, ToolSpec] | None = None,
    settings: WorkerSettings | None = None, passthrough: Sequence[str] = (),
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    """A worker hosting ``agents`` (``@agent`` classes; plain workflows may ride along) and
    their tools, bound to ``bind``. ``activities``: more of the project's own (an activity
    named as a tool serves it instead); ``external_tools``: the ``server.tool`` specs (MCP)
    it serves; ``settings``: Tower's own activities' (None: the environment's)."""
    if not agents:
        raise ValueError("build_worker needs at least one agent")
    if has_tower_plugin(client):  # this worker's plugin, with these settings, in its place
        config = client.config()
        config["plugins"] = [p for p in config["plugins"] if not isinstance(p, TowerPlugin)]
        client = Client(**config)
    plugin = TowerPlugin(bind=bind, tools=tools, external_tools=external_tools,
                         settings=settings, passthrough=passthrough)
    return Worker(client, task_queue=task_queue, workflows=list(agents),
                  activities=list(activities), plugins=[plugin], **worker_options)


def tool_activities(agents: Sequence[type], bind: Mapping[str, Any]
                    ) -> list[Callable[..., Any]]:
    """The activities of ``agents``' tools, bound to ``bind``: what a worker serving the
    tools of agents hosted on other workers registers (``build_worker`` does it itself)."""
    tools, users = hosted_tools(agents)
    return _made(tools, bind, (), users)
