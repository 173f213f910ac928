"""`tower state RUN` and `tower list`: look at runs. `list` reads Temporal's visibility
(search attributes) only, so it answers with no worker running."""

from __future__ import annotations

from typing import Any

import click

from tower.cli.output import json_option, print_json, table, tenant_option


@click.command("state", help="Print the state of run RUN (a workflow id) as JSON: the live "
                             "state of a running run (a worker answers), the final state of "
                             "a closed one.")
@click.argument("run", metavar="RUN")
@json_option("the same JSON (it is always JSON)")
@tenant_option
def state(run: str, as_json: bool) -> Any:
    return _state(run)


async def _state(run: str) -> int:
    from tower.cli.runs import run_state
    from tower.client import connect

    print_json(await run_state(await connect(), run))
    return 0


@click.command("list", help="List agent runs, newest first, found by search attribute "
                            "(no worker needed).")
@click.option("--agent", help="only runs of this agent")
@click.option("--status", help="only runs in this status (RUNNING, AWAITING_APPROVAL, DONE, "
                               "FAILED)")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@json_option("a JSON array of runs")
@tenant_option
def list_runs(agent: str | None, status: str | None, limit: int, as_json: bool) -> Any:
    return _list(agent, status, limit, as_json)


async def _list(agent: str | None, status: str | None, limit: int, as_json: bool) -> int:
    from tower.cli.runs import list_rows
    from tower.client import connect

    rows = await list_rows(await connect(), agent=agent, status=status, limit=limit)
    if as_json:
        print_json(rows)
        return 0
    table(["RUN", "AGENT", "STATUS", "NODE", "STEP"],
          [[r["run"], r["agent"] or "?", r["status"] or "?", r["node"] or "?", r["step"]]
           for r in rows], empty="(no runs)")
    return 0
