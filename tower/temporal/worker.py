"""``build_worker``: the one way to make a worker for a project's agents.

    from tower.temporal import build_worker
    worker = build_worker(client, task_queue="my-agents", agents=[MyAgent],
                          bind={"db": SQLite(".tower/payments.sqlite")})

A ``Worker`` with ``TowerPlugin`` (tower.temporal.plugin), which takes the place of a
client's own. The engine never imports a project's packages: the agents come in here.

Tower's housekeeping as Temporal work: a Schedule starts ``TowerStoreCleanup`` every
``EVERY``, which runs the cleanup activity (tower/activities/cleanup.py) on any worker of
the queue. One schedule per namespace and queue; every worker may ensure it at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.common import RetryPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker

from tower.activities.cleanup import CLEANUP_ACTIVITY
from tower.contract.failures import InvalidGraph
from tower.core.tools import Tool, ToolSpec
from tower.effects._tool import UNBOUND, activity_for
from tower.temporal.plugin import TowerPlugin, WorkerMisconfigured

if TYPE_CHECKING:
    from tower.activities.own import WorkerSettings

EVERY = timedelta(hours=1)  # between passes of the stores' cleanup
log = logging.getLogger("tower.stores")


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


@workflow.defn(name="tower_store_cleanup")
class TowerStoreCleanup:
    """One cleanup pass: returns how many runs' entries each store lost."""

    @workflow.run
    async def run(self, retention_seconds: float | None = None) -> dict[str, int]:
        return await workflow.execute_activity(
            CLEANUP_ACTIVITY, retention_seconds, result_type=dict,
            start_to_close_timeout=timedelta(minutes=30), heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=5))


def schedule_id(task_queue: str) -> str:
    return f"tower-store-cleanup-{task_queue}"


async def ensure_cleanup(client: Client, task_queue: str, every: timedelta = EVERY,
                         first: datetime | None = None) -> bool:
    """Create the cleanup schedule for ``task_queue`` unless it exists, its first pass not
    before ``first``; True if made now."""
    try:
        await client.create_schedule(schedule_id(task_queue), Schedule(
            action=ScheduleActionStartWorkflow(TowerStoreCleanup.run, id=schedule_id(
                task_queue), task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)],
                              start_at=first),
            # One pass at a time; a pass missed while no worker ran is not made up twice.
            policy=SchedulePolicy()))
    except ScheduleAlreadyRunningError:
        return False
    except RPCError as exc:  # e.g. an identity without the right to schedule: say so, go on
        log.warning("the stores' retention schedule %s was not made (%s): ask an operator "
                    "to run a worker that may create it (docs/production.md)",
                    schedule_id(task_queue), exc)
        return False
    return True
