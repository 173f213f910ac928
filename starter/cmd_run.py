"""`tower run AGENT --input JSON`: start a run and follow it transition by transition."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from starter.approvals import with_approvals
from starter.cmd_watch import end_event
from starter.common import CliError, agent_class, parse_input, ui_link
from starter.connection import TASK_QUEUE, connect, connect_config
from starter.live import watch
from tower.contract import search
from tower.temporal.runtime import FAILED_WAIT_MEMO
from workflows.chat import ChatAgent
from workflows.registry import AGENTS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="start an agent run and follow it",
        description="Start a run of AGENT with --input (JSON validated against the agent's "
                    "input model) and print each transition until the run ends or pauses. "
                    "A worker (`python worker.py`) must be running.")
    p.add_argument("agent", metavar="AGENT", help=f"one of: {', '.join(sorted(AGENTS))}")
    p.add_argument("--input", required=True, help='e.g. \'{"question": "Check ACC-1001"}\'')
    p.add_argument("--id", help="workflow id (default: AGENT-<random>)")
    p.add_argument("--task-queue", default=TASK_QUEUE)
    follow = p.add_mutually_exclusive_group()
    follow.add_argument("--follow", dest="follow", action="store_true", default=True,
                        help="show transitions live with a progress line (the default)")
    follow.add_argument("--no-follow", dest="follow", action="store_false",
                        help="start and print the run id only")
    p.add_argument("--json", action="store_true",
                   help="JSON for scripts: one object per line (started, each transition, end)")
    p.add_argument("--failed-wait", type=float, metavar="SECONDS",
                   help="how long a FAILED run waits for `tower retry`/`tower abort` before "
                        "it closes (default: the agent's, 7 days)")
    p.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    agent = agent_class(args.agent)
    request = parse_input(agent, args.input)
    if args.failed_wait is not None and not 0 <= args.failed_wait <= 366 * 86400:
        raise CliError(f"--failed-wait must be between 0 and a year in seconds, "
                       f"not {args.failed_wait}")
    client = await connect()
    run_id = args.id or f"{args.agent}-{uuid.uuid4().hex[:8]}"
    # A gated agent gets its per-run approval key (never the tenant's secret).
    request = with_approvals(request, client.namespace, run_id)
    handle = await client.start_workflow(
        agent.machine.name, request, id=run_id, task_queue=args.task_queue,
        search_attributes=TypedSearchAttributes([
            SearchAttributePair(search.AGENT_NAME, agent.machine.name),
            SearchAttributePair(search.AGENT_STATUS, "RUNNING")]),
        # The Web UI's "Summary" of the run: what was asked, in one line.
        static_summary=f"{agent.machine.name}: {args.input}"[:200],
        memo={} if args.failed_wait is None else {FAILED_WAIT_MEMO: args.failed_wait},
    )
    config = connect_config()
    link = ui_link(config["target_host"], config.get("namespace", "default"), run_id)
    if args.json:
        print(json.dumps({"event": "started", "run": run_id, "agent": agent.machine.name,
                          "task_queue": args.task_queue, "web_ui": link}), flush=True)
    else:
        print(f"started {run_id}", flush=True)
    if not args.follow:
        return 0
    if agent is ChatAgent:  # it waits for messages, for days: nothing to follow
        print(f"{run_id} is a chat thread waiting for messages: talk to it with "
              f"`tower chat {run_id}`", file=sys.stderr, flush=True)
        return 0
    if not await has_workers(client, args.task_queue):
        print(f"warning: no worker is polling task queue {args.task_queue!r}; the run waits "
              "until one starts (`python worker.py`)", file=sys.stderr, flush=True)
    progress = await watch(handle, as_json=args.json)
    status = progress.status
    state = await handle.query("state", result_type=dict)
    approvals = (await handle.query("approvals", result_type=dict)
                 if status == "AWAITING_APPROVAL" else {})
    if args.json:
        print(end_event(run_id, status, progress.step, progress.node, state=state,
                        pending=approvals.get("pending"), web_ui=link))
        return 0 if status != "FAILED" else 1
    print_outcome(status, state)
    if approvals:
        print_pending(approvals)
    print(f"Web UI: {link}")
    return 0 if status != "FAILED" else 1


async def has_workers(client: Client, task_queue: str) -> bool:
    response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    return bool(response.pollers)


def print_pending(approvals: dict[str, Any]) -> None:
    p = approvals.get("pending")
    if not p:
        return
    proposal = ", ".join(f"{k}={v}" for k, v in p["proposal"].items()).replace("\n", " ")
    print(f"waiting at gate {p['gate']} ({p['when']} {p['node']}) for role {p['role']} until "
          f"{p['expires_at']}")
    print(f"proposal: {proposal or '-'}")
    if p["editable"]:
        print(f"editable: {', '.join(p['editable'])}")
    print(f"decide with: tower approve {approvals['run']} --by NAME --role {p['role']}   "
          f"(or tower reject ...)")


def print_outcome(status: str, state: dict[str, Any]) -> None:
    print(f"status: {status}")
    final = [m for m in state.get("messages", []) if isinstance(m, dict)
             and m.get("role") == "assistant"]
    if final:
        print(f"reply: {final[-1]['content']}")
    for error in state.get("errors", []) or []:
        print(f"error: {error}")
