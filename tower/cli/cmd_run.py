"""`tower run AGENT --input JSON`: start a run and follow it transition by transition."""

from __future__ import annotations

import re
import sys
import uuid
from typing import Any

import click
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from tower.cli import project
from tower.cli.agents import help_names
from tower.cli.errors import CliError
from tower.cli.output import emit, json_option, print_json, say, tenant_option
from tower.contract import names
from tower.contract.render import inert


@click.command("run", help=(
    "Start a run of AGENT with --input (JSON validated against the agent's input model) and "
    "print each transition until the run ends, pauses at a gate or waits for input from "
    "outside. A worker (`python worker.py`) must be running."), epilog=f"AGENT is {help_names()}")
@click.argument("agent", metavar="AGENT")
@click.option("--input", "raw_input", required=True,
              help='e.g. \'{"question": "Check ACC-1001"}\'')
@click.option("--id", "run_id", help="workflow id (default: AGENT-<random>)")
@click.option("--task-queue", default=project.task_queue, show_default="the project's")
@click.option("--follow/--no-follow", default=True,
              help="show transitions live with a progress line (the default), or start and "
                   "print the run id only")
@click.option("--ui-url", metavar="URL", help="the Web UI's address for the printed link "
                                              "(default: TOWER_UI_URL, else the dev server's)")
@json_option("JSON for scripts: one object per line (started, each transition, the model's "
             "stream: model_started, each delta, model_finished, discard; end)")
@tenant_option
async def command(agent: str, raw_input: str, run_id: str | None, task_queue: str,
                  follow: bool, ui_url: str | None, as_json: bool) -> int:
    from tower.cli.approvals import check_policy, print_waiting
    from tower.cli.common import agent_class, parse_input
    from tower.cli.live import watch
    from tower.cli.ui import run_link, ui_base
    from tower.client import connect, start_run
    from tower.client._runs import has_workers
    from tower.core.details import span

    cls = agent_class(agent)
    request = parse_input(cls, raw_input)
    client = await connect()
    run_id = run_id or f"{agent}-{uuid.uuid4().hex[:8]}"
    # Refused here, before the run starts (the run refuses it too, for a client that skips
    # this check).
    check_policy(cls, request, client.namespace)
    handle = await start_run(
        client, cls, request, id=run_id, task_queue=task_queue,
        # The Web UI's "Summary" of the run: what was asked, in one line, inert (the UI
        # reads it as Markdown).
        static_summary=f"{cls.machine.name}: {span(raw_input[:200])}",
    )
    link = run_link(ui_url or await ui_base(client), client.namespace, run_id)
    emit({"event": "started", "run": run_id, "agent": cls.machine.name,
          "task_queue": task_queue, "web_ui": link}, f"started {run_id}")
    if not follow:
        return 0
    if getattr(cls, "waits_for_messages", False):  # a chat: days long, nothing to follow
        print(f"{run_id} is a chat thread waiting for messages: talk to it with "
              f"`tower chat {run_id}`", file=sys.stderr, flush=True)
        return 0
    if not await has_workers(client, task_queue):
        print(f"warning: no worker is polling task queue {task_queue!r}; the run waits "
              "until one starts (`python worker.py`)", file=sys.stderr, flush=True)
    progress = await watch(handle, as_json=as_json, stop_when_idle=True, client=client)
    status = progress.status
    state = await _final_state(client, handle, progress)
    approvals = (await handle.query(names.APPROVALS.name, result_type=dict)
                 if status == "AWAITING_APPROVAL" else {})
    if as_json:
        print_json({"event": "end", "run": run_id, "status": status, "step": progress.step,
                    "node": progress.node, "state": state, "pending": approvals.get("pending"),
                    "waiting_for_input": progress.idle, "reason": progress.reason,
                    "web_ui": link}, line=True)
        return 1 if progress.failed else 0
    print_outcome(status, state)
    if progress.reason:
        print(f"reason: {inert(progress.reason)}")
    if approvals:
        print_waiting(approvals)
    if progress.idle:
        say(f"{run_id} waits for input from outside (a signal or an update, e.g. an "
            f"event-driven agent's `event` signal); follow it again with `tower watch {run_id}`")
    if link:
        print(f"Web UI: {link}")
    return 1 if progress.failed else 0


async def _final_state(client: Any, handle: Any, progress: Any) -> dict[str, Any]:
    """The run's state where following stopped (``run_state``); nothing for a run that
    closed before its first step, or whose state nothing here or no worker can read."""
    from tower.cli.agents import project_agents
    from tower.client._runs import run_state

    if progress.closed and not progress.transitions:
        return {}
    try:
        return await run_state(client, handle.id, workflows=project_agents)
    except (CliError, RPCError, WorkflowQueryFailedError):
        if not progress.closed:
            raise
        return {}


def print_outcome(status: str, state: dict[str, Any]) -> None:
    print(f"status: {status}")
    final = [m for m in state.get("messages", []) if isinstance(m, dict)
             and m.get("role") == "assistant"]
    if final:
        print(f"reply: {final[-1]['content']}")
    # A run that ended DONE recovered from its errors: they are history, not its outcome.
    label = "recovered from" if status == "DONE" else "error"
    for error in state.get("errors", []) or []:
        # ``node: node: why`` (the node named by the engine and again by its reason) once.
        print(f"{label}: " + re.sub(r"^([\w.-]+): \1: ", r"\1: ", str(error)))
