"""`tower state`, `tower list`, `tower watch` and `tower cost`: look at runs.

A running run's state comes from the ``state`` query, which a worker answers; `list`
reads Temporal's visibility (search attributes) only, so it answers with no worker.
"""

from __future__ import annotations

from typing import Any

import click
from temporalio.client import Client

from tower.cli.common import CliError
from tower.cli.output import json_option, print_json, table, tenant_option
from tower.client import connect
from tower.client._runs import query, run_state
from tower.contract import names, search
from tower.contract.render import inert


@click.command("state", help="Print the state of run RUN (a workflow id) as JSON: the live "
                             "state of a running run (a worker answers), the final state of "
                             "a closed one.")
@click.argument("run", metavar="RUN")
@json_option("the same JSON (it is always JSON)")
@tenant_option
async def state(run: str, as_json: bool) -> int:
    from tower.cli.agents import project_agents

    print_json(await run_state(await connect(), run, workflows=project_agents))
    return 0


@click.command("list", help="List agent runs, newest first, found by search attribute "
                            "(no worker needed).")
@click.option("--agent", help="only runs of this agent")
@click.option("--status", help="only runs in this status (RUNNING, AWAITING_APPROVAL, DONE, "
                               "FAILED)")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option("a JSON array of runs")
@tenant_option
async def list_runs(agent: str | None, status: str | None, limit: int, as_json: bool) -> int:
    rows = await list_rows(await connect(), agent=agent, status=status, limit=limit)
    if as_json:
        print_json(rows)
        return 0
    table(["RUN", "AGENT", "STATUS", "NODE", "STEP"],
          [[r["run"], r["agent"] or "?", r["status"] or "?", r["node"] or "?", r["step"]]
           for r in rows], empty="(no runs)")
    return 0


@click.command("watch", help=(
    "Print RUN's transitions so far, then each new one as it happens, with a progress line "
    "(step, current node, status, elapsed) until the run ends. A run waiting at an approval "
    "gate is watched on until it is decided, unless --until-pause. --json prints JSON Lines, "
    "one object per transition, then a final {\"event\": \"end\", ...}."))
@click.argument("run", metavar="RUN")
@click.option("--until-pause", is_flag=True, help="stop when the run waits at an approval gate")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True),
              help="give up after this many seconds")
@json_option("JSON Lines for scripts")
@tenant_option
async def watch(run: str, until_pause: bool, timeout: float | None, as_json: bool) -> int:
    from tower.cli.live import watch as follow

    client = await connect()
    progress = await follow(client.get_workflow_handle(run), as_json=as_json,
                            stop_at_pause=until_pause, timeout=timeout)
    if as_json:
        why = {"reason": progress.reason} if progress.reason else {}
        print_json({"event": "end", "run": progress.run, "status": progress.status,
                    "step": progress.step, "node": progress.node, **why}, line=True)
    elif progress.reason:
        # The run's words (a tool's, a model's): one inert line, whatever they hold.
        print(f"{progress.run} ended {progress.status}: {inert(progress.reason)}", flush=True)
    return 1 if progress.failed else 0


@click.command("cost", help=(
    "Print what run RUN spent on models: the run's total, each node's and each call's tokens "
    "and estimated cost (prices from TOWER_PRICES on the worker; an unpriced model counts $0)."))
@click.argument("run", metavar="RUN")
@json_option("print the report as JSON")
@tenant_option
async def cost(run: str, as_json: bool) -> int:
    client = await connect()  # (a run the server does not know: RunNotFound, as `state`)
    report: dict[str, Any] = await query(client, client.get_workflow_handle(run),
                                         names.COST.name, dict)
    if as_json:
        print_json(report)
        return 0

    def row(label: str, f: dict[str, Any]) -> list[Any]:
        return [label, f["calls"], f["prompt_tokens"], f["completion_tokens"],
                f"{f['cost_usd']:.6f}"]

    rows = [row(f"  step {c['step']} {c['node']} ({c['model']})", c)
            for c in report.get("calls", [])]
    rows += [row(f"node {node}", f) for node, f in report.get("nodes", {}).items()]
    if report.get("run"):
        rows.append(row("run", report["run"]))
    table(["", "calls", "prompt", "completion", "cost $"], rows)
    return 0


async def list_rows(client: Client, *, agent: str | None = None, status: str | None = None,
                    limit: int = 20) -> list[dict[str, Any]]:
    """Runs newest first, from the search attributes each run keeps current."""
    clauses = [f"{search.AGENT_NAME.name} IS NOT NULL"]
    for value in (agent, status):
        if value and not value.replace("_", "").replace("-", "").isalnum():
            raise CliError(f"invalid filter value {value!r}")
    if agent:
        clauses.append(f"{search.AGENT_NAME.name} = '{agent}'")
    if status:  # DONE and FAILED: the closed execution says it (search.status_clause)
        clauses.append(search.status_clause(status))
    rows = []
    async for wf in client.list_workflows(" AND ".join(clauses), limit=limit):
        sa = wf.typed_search_attributes
        shown = search.run_status(wf.status, sa)
        rows.append({"run": wf.id, "agent": sa.get(search.AGENT_NAME), "status": shown,
                     # A DONE run need not have published its last node (search.py).
                     "node": "DONE" if shown == "DONE" else sa.get(search.AGENT_NODE),
                     "step": sa.get(search.AGENT_STEP) or 0,
                     "started": wf.start_time.isoformat() if wf.start_time else None})
    return rows
