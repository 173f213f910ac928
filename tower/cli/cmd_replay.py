"""`tower history export RUN` and `tower replay PATH...`: histories out of the server,
and back through the current code."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from tower.cli.agents import agents
from tower.cli.common import CliError, imported
from tower.cli.output import json_option, print_json, run_argument, tenant_option
from tower.client import connect
from tower.client.connection import connect_config
from tower.temporal.replay import Replayed, history_file_name, load, report
from tower.temporal.replay import replay as run_replay


@click.group("history", help="Work with a run's Temporal event history.")
def history() -> None:
    pass


@history.command("export", help=(
    "Write the event history of RUN (a workflow id) as JSON, the format the Web UI and "
    "`temporal workflow show --output json` produce. The file's name is the workflow id "
    "(plus @RUN_ID for a chosen run), which `tower replay` reads back."))
@run_argument
@click.option("-o", "--output", "target",
              help="file or folder to write (default: RUN.json, or RUN@RUN_ID.json with "
                   "--run-id)")
@json_option("what was written, as JSON")
@tenant_option
async def export(run: str, run_id: str | None, target: str | None, as_json: bool) -> int:
    history = await fetch(await connect(), run, run_id)
    # The name carries the workflow id, which replay needs; a chosen run gets its id too.
    # Encoded: a run id is chosen by whoever started the run ("../x", "/tmp/x").
    name = history_file_name(run, run_id)
    out = Path(target or name)
    try:
        if target and target.endswith(("/", os.sep)):  # `-o histories/`: a folder, made if new
            out.mkdir(parents=True, exist_ok=True)
        if out.is_dir():
            out = out / name
        out.write_text(history.to_json())
    except OSError as exc:
        raise CliError(f"cannot write the history to {exc.filename or out}: "
                       f"{exc.strerror or exc}") from None
    if as_json:
        print_json({"run": run, "run_id": run_id, "events": len(history.events),
                    "path": str(out)})
    else:
        print(f"wrote {len(history.events)} events of {run} to {out}")
    return 0


@click.command("replay", help=(
    "Replay history files (or every *.json in folders) against the current agents with the "
    "worker's sandbox and converter, then check each run's transition log: steps strictly "
    "increase, only declared moves, DONE and FAILED are never left, "
    "and the path is the one the original run recorded. Exits 1 if any history fails."))
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("-v", "--verbose", is_flag=True, help="print every transition")
@click.option("--namespace", help="the namespace the runs were recorded in; workflow code may "
                                  "read it (default: the tenant, TEMPORAL_NAMESPACE, else "
                                  "'default')")
@click.option("--workflows", metavar="MODULE:NAME",
              help="replay against these workflow classes (a class, or a list or dict of "
                   "them) instead of Tower's registered agents")
@json_option("each history's result as JSON")
@tenant_option
async def replay(paths: tuple[str, ...], verbose: bool, namespace: str | None,
                 workflows: str | None, as_json: bool) -> int:
    histories = load(list(paths))
    classes = import_workflows(workflows) if workflows else list(agents().values())
    namespace = namespace or connect_config().get("namespace") or "default"
    results = await run_replay(histories, workflows=classes, namespace=namespace)
    bad = [r for r in results if not r.ok]
    if as_json:
        print_json({"replayed": len(results), "ok": len(results) - len(bad), "failed": len(bad),
                    "histories": [as_data(r) for r in results]})
        return 1 if bad else 0
    for result in results:
        print(report(result, verbose=verbose))
    print(f"{len(results)} histories replayed: {len(results) - len(bad)} ok, {len(bad)} failed")
    return 1 if bad else 0


async def fetch(client: Client, run: str, run_id: str | None = None) -> WorkflowHistory:
    """A run's history; a clear error when the server does not know the run."""
    handle = client.get_workflow_handle(run, run_id=run_id)
    try:
        return await handle.fetch_history()
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise CliError(f"run {run!r}{f' ({run_id})' if run_id else ''} not found: "
                           f"{exc.message}") from None
        raise


def as_data(result: Replayed) -> dict[str, Any]:
    return {"source": result.source, "workflow_id": result.workflow_id,
            "workflow_type": result.workflow_type, "ok": result.ok, "failure": result.failure,
            "problems": result.problems, "steps": len(result.log),
            "node": result.log[-1].target if result.log else None,
            "transitions": [t.model_dump(mode="json") for t in result.log]}


def import_workflows(spec: str) -> list[type]:
    found = imported("--workflows", spec)
    classes = list(found.values() if isinstance(found, dict) else
                   found if isinstance(found, list | tuple) else [found])
    if not classes or not all(isinstance(c, type) for c in classes):
        raise CliError(f"--workflows {spec}: not a workflow class or a list/dict of them")
    return classes
