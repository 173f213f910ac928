"""``build_worker``: a Temporal worker for a project's agents, with ``TowerPlugin``'s settings.

    from tower.temporal.worker import build_worker
    worker = build_worker(client, task_queue="my-agents", agents=[MyAgent],
                          activities=[my_model.call_model, *my_tools])

The same as ``Worker(client, task_queue=..., workflows=agents, activities=...)`` on a client
connected with ``plugins=[TowerPlugin()]`` (tower.temporal.plugin); a client without the
plugin gets it for this worker. The engine never imports a project's packages: the agents
and activities come in here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from tower.core.tools import ToolSpec, register_external
from tower.temporal.converter import pydantic_converter
from tower.temporal.plugin import (
    WORKFLOW_FAILURE_TYPES,
    TowerPlugin,
    check_external_tools,
    has_tower_plugin,
    sandbox_runner,
)

__all__ = ["WORKFLOW_FAILURE_TYPES", "build_worker", "check_external_tools",
           "pydantic_converter", "sandbox_runner"]


def build_worker(
    client: Client, *, task_queue: str, agents: Sequence[type],
    activities: Sequence[Callable[..., Any]] = (),
    external_tools: Mapping[str, ToolSpec] | None = None,
    passthrough: Sequence[str] = (), max_concurrent_activities: int = 50,
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    """A worker hosting ``agents`` (``@agent`` classes; plain workflows may ride along)
    and ``activities``; ``external_tools`` are the ``server.tool`` specs (MCP) it serves."""
    if not agents:
        raise ValueError("build_worker needs at least one agent")
    plugins: list[TowerPlugin] = []
    if has_tower_plugin(client):
        # The client's plugin configures the worker; what only this worker adds is here.
        check_external_tools(agents, set(external_tools or {}))
        register_external(external_tools or {})
        worker_options.setdefault("workflow_runner", sandbox_runner(*passthrough))
    else:
        plugins.append(TowerPlugin(passthrough=passthrough, external_tools=external_tools))
    return Worker(
        client, task_queue=task_queue, workflows=list(agents), activities=list(activities),
        max_concurrent_activities=max_concurrent_activities, plugins=plugins, **worker_options)
