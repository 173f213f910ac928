"""`tower state RUN` and `tower list`: look at runs through queries and search attributes."""

from __future__ import annotations

import argparse
import json
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from starter.common import CliError, not_found_is
from starter.connection import connect
from tower.contract import search


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("state", help="print a run's current state as JSON",
                       description="Print the state of run RUN (a workflow id): the live state "
                                   "of a running run, the final state of a closed one.")
    p.add_argument("run", metavar="RUN", help="workflow id")
    p.add_argument("--json", action="store_true", help="the same JSON (it is always JSON)")
    p.set_defaults(handler=state)

    p = sub.add_parser("list", help="list agent runs",
                       description="List agent runs, newest first, found by search attribute.")
    p.add_argument("--agent", help="only runs of this agent")
    p.add_argument("--status", help="only runs in this status (RUNNING, AWAITING_APPROVAL, "
                                    "DONE, FAILED)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true", help="a JSON array of runs")
    p.set_defaults(handler=list_runs)


async def run_state(client: Client, run: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(run, result_type=dict)
    with not_found_is(f"run {run!r} not found"):
        info = await handle.describe()
    if info.status == WorkflowExecutionStatus.COMPLETED:
        result: dict[str, Any] = await handle.result()
        return result
    if info.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"run {run!r} is {info.status.name if info.status else 'unknown'}")
    state: dict[str, Any] = await handle.query("state", result_type=dict)
    return state


async def state(args: argparse.Namespace) -> int:
    client = await connect()
    print(json.dumps(await run_state(client, args.run), indent=2, sort_keys=True))
    return 0


def list_query(agent: str | None, status: str | None) -> str:
    clauses = [f"{search.AGENT_NAME.name} IS NOT NULL"]
    for key, value in ((search.AGENT_NAME, agent), (search.AGENT_STATUS, status)):
        if value:
            if not value.replace("_", "").replace("-", "").isalnum():
                raise CliError(f"invalid filter value {value!r}")
            clauses.append(f"{key.name} = '{value}'")
    return " AND ".join(clauses)


async def list_runs(args: argparse.Namespace) -> int:
    client = await connect()
    query = list_query(args.agent, args.status)
    rows = []
    async for wf in client.list_workflows(query, limit=args.limit):
        sa = wf.typed_search_attributes
        rows.append({"run": wf.id, "agent": sa.get(search.AGENT_NAME),
                     "status": sa.get(search.AGENT_STATUS), "node": sa.get(search.AGENT_NODE),
                     "step": sa.get(search.AGENT_STEP) or 0,
                     "started": wf.start_time.isoformat() if wf.start_time else None})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'RUN':<28} {'AGENT':<12} {'STATUS':<18} {'NODE':<16} STEP")
    for r in rows:
        print(f"{r['run']:<28} {r['agent'] or '?':<12} {r['status'] or '?':<18} "
              f"{r['node'] or '?':<16} {r['step']}")
    if not rows:
        print("(no runs)")
    return 0
