"""Reading runs for the CLI: a run's state, and runs found through visibility.

A running run's state comes from the ``state`` query, which a worker answers; when
none can, the error says so instead of waiting on the server's query timeout.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from tower.cli.common import CliError, not_found_is
from tower.client._runs import QUERY_TIMEOUT, ask, check_started, has_workers, no_worker, query
from tower.contract import names, search

__all__ = ["QUERY_TIMEOUT", "failed_state", "has_workers", "list_query", "list_rows",
           "no_worker", "query", "run_state"]


async def run_state(client: Client, run: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(run, result_type=dict)
    with not_found_is(f"run {run!r} not found"):
        info = await handle.describe()
    if info.status == WorkflowExecutionStatus.COMPLETED:
        result: dict[str, Any] = await handle.result()
        return result
    if info.status == WorkflowExecutionStatus.FAILED:  # a FAILED run (AgentFailed)
        await check_started(handle, info)  # one whose input was refused has no state
        return await failed_state(client, handle, info.task_queue)
    if info.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"run {run!r} is {info.status.name if info.status else 'unknown'}")
    state: dict[str, Any] = await query(client, handle, names.STATE.name, dict)
    return state


async def failed_state(client: Client, handle: WorkflowHandle[Any, Any],
                       task_queue: str) -> dict[str, Any]:
    """A failed run's final state, read from its history replayed here (no worker needed;
    a replay that succeeds is the run's own state). When this code cannot replay it (the
    agent changed since), a worker of the run's own build answers the ``state`` query."""
    from tower.cli.histories import replay
    from tower.client.connection import connect_config

    history = await handle.fetch_history()
    [replayed] = await replay([(handle.id, history)],
                              namespace=connect_config().get("namespace") or client.namespace)
    if not replayed.failure and replayed.states:
        return replayed.states[-1].model_dump(mode="json")
    why = replayed.failure or "no transitions"
    if not await has_workers(client, task_queue):
        raise CliError(f"run {handle.id!r} failed, and its history does not replay against "
                       f"this code ({why}); start a worker of the code that ran it and ask "
                       "again")
    state: dict[str, Any] = await ask(handle, names.STATE.name, dict)
    return state


def list_query(agent: str | None, status: str | None) -> str:
    clauses = [f"{search.AGENT_NAME.name} IS NOT NULL"]
    for value in (agent, status):
        if value and not value.replace("_", "").replace("-", "").isalnum():
            raise CliError(f"invalid filter value {value!r}")
    if agent:
        clauses.append(f"{search.AGENT_NAME.name} = '{agent}'")
    if status:  # DONE and FAILED: the closed execution says it (search.status_clause)
        clauses.append(search.status_clause(status))
    return " AND ".join(clauses)


async def list_rows(client: Client, *, agent: str | None = None, status: str | None = None,
                    limit: int = 20) -> list[dict[str, Any]]:
    """Runs newest first, from the search attributes each run keeps current."""
    rows = []
    async for wf in client.list_workflows(list_query(agent, status), limit=limit):
        sa = wf.typed_search_attributes
        status = search.run_status(wf.status, sa)
        rows.append({"run": wf.id, "agent": sa.get(search.AGENT_NAME), "status": status,
                     # A DONE run need not have published its last node (search.py).
                     "node": "DONE" if status == "DONE" else sa.get(search.AGENT_NODE),
                     "step": sa.get(search.AGENT_STEP) or 0,
                     "started": wf.start_time.isoformat() if wf.start_time else None})
    return rows
