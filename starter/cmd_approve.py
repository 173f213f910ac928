"""`tower pending`, `tower approve RUN`, `tower reject RUN`: human decisions at gates.

A decision goes to the run as the ``decide`` update, so the command prints the outcome
the run itself reported (or the reason it refused the decision, which then changed
nothing). ``--signal`` sends it as a fire-and-forget signal instead.
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError

from starter.approvals import make_decision, parse_edits
from starter.cmd_run import print_outcome as print_run_outcome
from starter.common import CliError, follow, not_found_is
from starter.connection import connect
from tower.contract import search
from tower.contract.decisions import Verdict
from tower.core.approval import Outcome


class DecisionRefused(CliError):
    """The run refused the decision; nothing changed."""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pending", help="list runs awaiting an approval decision",
                       description="List runs whose status is AWAITING_APPROVAL (found by "
                                   "search attribute) with the gate, role, expiry and proposal.")
    p.add_argument("--agent", help="only runs of this agent")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(handler=pending)
    for verb, verdict in (("approve", Verdict.APPROVE), ("reject", Verdict.REJECT)):
        p = sub.add_parser(verb, help=f"{verb} a run's pending gate (signed decision)",
                           description=f"{verb.capitalize()} the pending approval of RUN and "
                                       "print the outcome the run reported. The decision is "
                                       "signed with the tenant's approval secret "
                                       "(TOWER_APPROVAL_SECRET or TOWER_APPROVAL_SECRET_FILE).")
        p.add_argument("run", metavar="RUN", help="workflow id")
        p.add_argument("--gate", help="gate id (default: the run's pending gate)")
        p.add_argument("--by", required=True, metavar="NAME", help="who decides")
        p.add_argument("--role", help="the role you decide as (default: $TOWER_ROLE)")
        p.add_argument("--note", default="", help="why (shown to the run and in its log)")
        if verdict == Verdict.APPROVE:
            p.add_argument("--set", action="append", metavar="FIELD=VALUE", dest="edits",
                           help="change an editable field, e.g. --set amount_cents=50000")
        p.add_argument("--decision-id", help="idempotency id (resending it changes nothing)")
        p.add_argument("--signal", action="store_true", help="send as a signal, don't wait")
        p.add_argument("--no-follow", action="store_true",
                       help="print the outcome only, not the run's next transitions")
        p.set_defaults(handler=decide, verdict=verdict)


async def pending(args: argparse.Namespace) -> int:
    client = await connect()
    query = f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL'"
    if args.agent:
        if not args.agent.isidentifier():
            raise CliError(f"invalid agent name {args.agent!r}")
        query += f" AND {search.AGENT_NAME.name} = '{args.agent}'"
    count = 0
    async for wf in client.list_workflows(query, limit=args.limit):
        try:
            info = await client.get_workflow_handle(wf.id).query("approvals", result_type=dict)
        except RPCError:
            continue  # closed between the listing and the query
        p = info.get("pending")
        if not p:
            continue
        count += 1
        proposal = ", ".join(f"{k}={v}" for k, v in p["proposal"].items()).replace("\n", " ")
        print(f"{wf.id}  agent={info['agent']}  gate={p['gate']} ({p['when']} {p['node']})  "
              f"role={p['role']}  expires={p['expires_at']}")
        print(f"    proposal: {proposal or '-'}")
        if p["editable"]:
            print(f"    editable: {', '.join(p['editable'])}")
    if count == 0:
        print("(no runs awaiting approval)")
    return 0


async def decide(args: argparse.Namespace) -> int:
    client = await connect()
    try:
        out = await send_decision(
            client, args.run, args.verdict, approver=args.by, role=args.role, gate=args.gate,
            note=args.note, edits=parse_edits(getattr(args, "edits", None)),
            decision_id=args.decision_id, use_signal=args.signal, say=print)
    except DecisionRefused as exc:
        print(f"refused: {exc}")
        print("the run's state is unchanged")
        return 1
    if out is None:
        return 0
    print_outcome(out)
    if not args.no_follow:
        handle = client.get_workflow_handle(args.run)
        status = await follow(handle, skip=out.requested_step)
        print_run_outcome(status, await handle.query("state", result_type=dict))
    return 0


def print_outcome(out: Outcome) -> None:
    dup = " (duplicate: already applied, nothing changed)" if out.duplicate else ""
    print(f"outcome: gate {out.gate} {out.result.value}{dup}"
          + (f" — {out.reason}" if out.reason else ""))
    print(f"run: {out.status} at {out.node}, step {out.step}")


async def send_decision(
    client: Client, run: str, verdict: Verdict, *, approver: str, role: str | None,
    gate: str | None = None, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, use_signal: bool = False, say: Any = None,
) -> Outcome | None:
    """Build, sign and send one decision; the Outcome, or None for a signal."""
    handle = client.get_workflow_handle(run)
    approvals = await _approvals(client, run)
    pending = approvals.get("pending")
    if pending is None:
        raise CliError(f"run {run!r} has no pending approval ({_last_request(approvals)})")
    role = role or os.environ.get("TOWER_ROLE")
    if not role:
        raise CliError(f"gate {pending['gate']!r} needs role {pending['role']!r}: say which "
                       "role you decide as with --role (or TOWER_ROLE)")
    decision, how = make_decision(
        tenant=client.namespace, run=run, gate=gate or pending["gate"], verdict=verdict,
        approver=approver, role=role, expires_at=datetime.fromisoformat(pending["expires_at"]),
        note=note, edits=edits, decision_id=decision_id)
    if say:
        say(f"decision {decision.decision_id}: {verdict.value} gate {decision.gate} of {run} "
            f"by {approver} ({role}), {how}")
    payload = decision.model_dump(mode="json")
    if use_signal:
        await handle.signal("decision", payload)
        if say:
            say("sent as a signal; refused signals are listed in the run's audit trail "
                "(query `approvals`)")
        return None
    try:
        return await handle.execute_update("decide", payload, result_type=Outcome)
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        raise DecisionRefused(getattr(cause, "message", None) or str(cause)) from None


async def _approvals(client: Client, run: str) -> dict[str, Any]:
    handle = client.get_workflow_handle(run)
    with not_found_is(f"run {run!r} not found in namespace {client.namespace!r}"):
        info = await handle.describe()
    if info.status != WorkflowExecutionStatus.RUNNING:
        status = info.status.name if info.status else "unknown"
        last = ""
        if info.status == WorkflowExecutionStatus.COMPLETED:
            state = await client.get_workflow_handle(run, result_type=dict).result()
            last = "; " + _last_request({"records": state.get("approvals", [])})
        raise CliError(f"run {run!r} is closed ({status}): nothing to decide{last}")
    result: dict[str, Any] = await handle.query("approvals", result_type=dict)
    return result


def _last_request(approvals: dict[str, Any]) -> str:
    records = approvals.get("records") or []
    if not records:
        return "it never asked for one"
    r = records[-1]
    decided = r.get("decision") or {}
    who = f" by {decided.get('approver')}" if decided else ""
    when = f" (expired at {r['expires_at']})" if r["status"] == "expired" else ""
    return f"its last request, gate {r['gate']}, was {r['status']}{who}{when}"
