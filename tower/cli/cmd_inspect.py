"""`tower inspect RUN [--step N]` and `tower fork RUN --step N`: time travel on a run; and
`tower retry RUN --from NODE`, an operator's decision on a FAILED run.

Inspect and fork replay the run's history (running or closed) locally against the current
code, which gives the transition log and the state after every step without a worker; fork
then asks Temporal to reset the run to the workflow task that recorded step N. Retry resets a
FAILED run to just before it last entered NODE (``tower.client.retry``); a retry refused (the
run did not fail, it never entered NODE) changes nothing.
"""

from __future__ import annotations

import getpass
import io
import json
from pathlib import Path

import click
from temporalio.client import WorkflowHistory

from tower.cli.agents import agents
from tower.cli.cmd_replay import fetch
from tower.cli.common import CliError
from tower.cli.live import follow, watch
from tower.cli.output import json_option, print_json, run_argument, table, tenant_option
from tower.client import connect
from tower.client import retry as retry_from
from tower.client._recovery import reset
from tower.client._runs import refusal
from tower.client.connection import connect_config
from tower.client.errors import NeverStarted
from tower.contract.render import inert
from tower.temporal.replay import (
    HistoryError,
    Replayed,
    history_end,
    history_failure,
    load,
    readable,
    replay_run,
    task_completed_after,
)


@click.command("inspect", help=(
    "Print the transition table of RUN (step, from, to, reason, time, history event) and, "
    "with --step N, the full state as it was after step N. RUN is a workflow id (running or "
    "closed) or a history JSON file; the history is replayed locally, no worker needed."))
@run_argument  # RUN: a workflow id, or a history .json file
@click.option("--step", type=int, help="print the full state after this step")
@json_option("the run, its transitions (and the state after --step) as JSON")
@tenant_option
async def inspect(run: str, run_id: str | None, step: int | None, as_json: bool) -> int:
    history, result = await replayed(run, run_id, ended=True)
    end = await history_end(history)  # how it ended, when it did not complete
    last = result.states[-1] if result.log else None
    state = None
    if step is not None and last is not None:
        state = result.state_after(step).model_dump(mode="json")
    if as_json:
        print_json({"run": result.workflow_id, "agent": result.workflow_type,
                    "history_events": len(history.events), "node": last.node if last else None,
                    "status": last.status.value if last else end[0] if end else None,
                    "step": last.step if last else 0,
                    "transitions": [t.model_dump(mode="json") for t in result.log],
                    "warnings": result.problems, "state_after_step": state,
                    "reason": end[1] if end else None})
        return 0
    head = f"run {result.workflow_id} · agent {result.workflow_type} · " \
           f"{len(history.events)} history events"
    if last is None:  # it closed before its first step: the reason is all there is
        assert end is not None
        print(f"{head} · ended {end[0]} before its first step\nreason: {inert(end[1])}")
        return 0
    print(f"{head} · now at {last.node} ({last.status.value}, step {last.step})")
    table(["STEP", "FROM", "TO", "TIME", "EVENT", "REASON"],
          [[t.step, t.source, t.target, t.at.isoformat(timespec="milliseconds"), t.event_id,
            t.reason] for t in result.log])
    for problem in result.problems:
        print(f"warning: {problem}")
    if end is not None:
        print(f"ended {end[0]}: {inert(end[1])}")
    if state is not None:
        print(f"\nstate after step {step}:")
        print(json.dumps(state, indent=2, sort_keys=True))
    return 0


@click.command("fork", help=(
    "Reset RUN to the workflow task that recorded step N: a new run of the same workflow id "
    "continues from there, without the signals and updates that came after, so a different "
    "decision can be made. The original run's history is kept. Activities after the reset "
    "point run again, but a side effect already made for the same action is not: an "
    "approval of the same request (gate, visit, proposal digest), with or without edits, "
    "gets the first effect's result."))
@run_argument
@click.option("--step", type=int, required=True, help="the step to restart after")
@click.option("--reason", default="tower fork", show_default=True,
              help="recorded in the history")
@json_option("the new run as JSON")
@tenant_option
async def fork(run: str, run_id: str | None, step: int, reason: str, as_json: bool) -> int:
    if run.endswith(".json") and Path(run).is_file():
        raise CliError("fork needs a run on the server (a workflow id), not a history file")
    history, result = await replayed(run, run_id)
    steps = {t.step: t for t in result.log}
    if step not in steps:
        raise CliError(f"{run} has no step {step} (steps {result.log[0].step}.."
                       f"{result.log[-1].step})")
    chosen = steps[step]
    completed = task_completed_after(history, chosen.event_id)
    if completed is None:
        raise CliError(f"step {step} of {run} is in a workflow task that has not "
                       "completed yet; wait for it, or fork from an earlier step")
    client = await connect()
    original = history.events[0].workflow_execution_started_event_attributes
    run_id = run_id or (await client.get_workflow_handle(run).describe()).run_id or ""
    # A fork exists to decide differently: the old decisions are not replayed into it.
    new_run_id = await reset(client, run, run_id, completed.event_id,
                             f"{reason}: fork at step {step}")
    same_task = [t.step for t in result.log if t.event_id == chosen.event_id]
    if as_json:
        print_json({"run": run, "step": step, "new_run_id": new_run_id,
                    "original_run_id": run_id, "reset_event_id": completed.event_id,
                    "replayed_steps": [result.log[0].step, max(same_task)],
                    "steps_rerun": same_task if len(same_task) > 1 else []})
        return 0
    print(f"forked {run} at step {step}: new run {new_run_id}")
    print(f"  reset to workflow task completed event {completed.event_id}: the new run "
          f"replays steps {result.log[0].step}..{max(same_task)} from the history"
          + (f" (steps {', '.join(map(str, same_task))} were made in that workflow task, "
             "which runs again)" if len(same_task) > 1 else ""))
    print("  signals and updates sent after that point are NOT re-applied: send the new "
          "decision to the new run")
    print("  activities after the reset point run again (model calls, tools); a side "
          "effect the run already made for the same action returns that effect instead of "
          "acting twice: the action is the approved request (gate, visit, proposal "
          "digest), whatever a new approval's edits, or without a gate the node visit, the "
          "call and its arguments")
    print(f"  original run {run_id} keeps its history (workflow type "
          f"{original.workflow_type.name}); if it was still running, the reset terminated it")
    print(f"  follow the new run: tower inspect {run}")
    return 0


@click.command("retry", help=(
    "Take FAILED run RUN back to NODE and follow it: Temporal resets the run to just before "
    "it last entered NODE, and the new run goes on from there with the current code. "
    "Effects already made for the same action are found by their key, not made again."))
@click.argument("run", metavar="RUN")
@click.option("--from", "node", required=True, metavar="NODE",
              help="the node to run again (`tower inspect RUN` shows the path)")
@click.option("--by", default=None, help="who decides (default: your user name); recorded "
                                         "in the reset's reason")
@click.option("--no-follow", is_flag=True, help="do not follow the run")
@json_option("the reset (new run id) and the run's status after following, as JSON")
@tenant_option
async def retry(run: str, node: str, by: str | None, no_follow: bool, as_json: bool) -> int:
    by = by or getpass.getuser()
    client = await connect()
    done = await retry_from(client, run, node, by=by, workflows=list(agents().values()))
    handle = client.get_workflow_handle(run)  # the newest run: the one the reset started
    if as_json:
        status = None if no_follow else (await watch(
            handle, as_json=False, out=io.StringIO(), progress_line=False)).status
        print_json({"run": run, "retry_from": node, "by": by, "answer": done.answer,
                    "new_run_id": done.new_run_id, "status": status})
        return 0
    print(done.answer)
    if not no_follow:
        print(f"status: {await follow(handle, skip=done.skip)}")
    return 0


async def replayed(run: str, run_id: str | None, *, ended: bool = False
                   ) -> tuple[WorkflowHistory, Replayed]:
    """The history of RUN (a file or a workflow id) and its replay.
    ``ended``: a run that closed before its first step is no error (it has no log)."""
    namespace = connect_config().get("namespace") or "default"
    if run.endswith(".json") and Path(run).is_file():
        histories = load([run])
    else:
        histories = [(run, await fetch(await connect(), run, run_id))]
    (source, history), = histories
    await readable(source, history)
    why = refusal(await history_failure(history))
    if why is not None:  # failed before its first step: no steps, no state to show
        raise NeverStarted(source, why)
    try:
        result = await replay_run(source, history, workflows=list(agents().values()),
                                  namespace=namespace)
    except HistoryError as exc:
        end = await history_end(history)
        how = f" (it ended {end[0]}: {end[1]})" if end else ""
        raise CliError(f"{exc}{how}") from None
    if not result.log and not (ended and await history_end(history)):
        raise CliError(f"{source} is a {result.workflow_type!r} run with no transitions yet")
    return history, result
