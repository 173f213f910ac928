"""``build_worker``: the one way to make a worker for a project's agents.

    from tower.temporal import build_worker
    worker = build_worker(client, task_queue="my-agents", agents=[MyAgent],
                          bind={"db": SQLite(".tower/payments.sqlite")})

A ``Worker`` with ``TowerPlugin`` (tower.temporal.plugin), which takes the place of a
client's own. The engine never imports a project's packages: the agents come in here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import Worker

from tower.core.tools import ToolSpec
from tower.temporal.plugin import TowerPlugin

if TYPE_CHECKING:
    from tower.activities.own import WorkerSettings


def build_worker(
    client: Client, *, task_queue: str, agents: Sequence[type],
    bind: Mapping[str, Any] | None = None, tools: bool = True,
    activities: Sequence[Callable[..., Any]] = (),
    external_tools: Mapping[str, ToolSpec] | None = None,
    settings: WorkerSettings | None = None, passthrough: Sequence[str] = (),
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    """A worker hosting ``agents`` (plain workflows may ride along) and their tools, bound
    to ``bind`` (a tool left unbound refuses the start; ``tools=False``: none served).
    ``activities``: more of the project's own (one named as a tool serves it);
    ``external_tools``: the ``server.tool`` specs (MCP) it serves; ``settings``: Tower's
    own activities' (None: the environment's)."""
    if not agents:
        raise ValueError("build_worker needs at least one agent")
    config = client.config()  # this worker's plugin, with these settings, in a client's place
    if any(isinstance(p, TowerPlugin) for p in config["plugins"]):
        config["plugins"] = [p for p in config["plugins"] if not isinstance(p, TowerPlugin)]
        client = Client(**config)
    plugin = TowerPlugin(bind=bind, tools=tools, external_tools=external_tools,
                         settings=settings, passthrough=passthrough)
    return Worker(client, task_queue=task_queue, workflows=list(agents),
                  activities=list(activities), plugins=[plugin], **worker_options)
