"""What the gate tests share: decisions signed with the approvers' own keys (made by the
session's ``trust`` fixture in tests/conftest.py), waiting for a gate."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError

from tower.client import retry
from tower.client._decisions import submit_decision
from tower.client.keys import load_key, new_key
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from tower.contract.failures import rebuilt
from tower.contract.trust import EventClaims
from tower.core.signing import EVENT_TYPE, decision_claims, sign
from tower.temporal._task_time import AHEAD_OF_ITS_TASK
from workflows.refund import RefundRequest
from workflows.registry import AGENTS

BIG_REFUND = "Please refund $1,200 on invoice INV-2004"
NO_PROPOSAL = "sha256:" + "0" * 64  # a decision sent before any request was shown


def refund_request(client: Client, run: str, **kw: Any) -> RefundRequest:
    return RefundRequest(message=kw.pop("message", BIG_REFUND), **kw)


async def send_retry(client: Client, run: str, node: str, by: str) -> str:
    """What `tower retry` does, without following: the reset, and its answer."""
    return (await retry(client, run, node, by=by, workflows=list(AGENTS.values()))).answer


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def decision(
    client: Client, run: str, pending: dict[str, Any] | None, *,
    verdict: Verdict = Verdict.APPROVE, approver: str = "alice", role: str = "manager",
    gate: str | None = None, edits: dict[str, Any] | None = None, decision_id: str | None = None,
    key: dict[str, Any] | None = None, tenant: str | None = None, request: int | None = None,
    note: str = "", unsigned: bool = False, lifetime: int = 600, now: float | None = None,
    run_id: str | None = None, proposal: str | None = None,
) -> dict[str, Any]:
    """A decision as the wire carries it: signed with ``approver``'s own key (or ``key``),
    for ``tenant`` (default: the client's) and the pending request (its run id, step and
    proposal digest, unless given)."""
    shown = GateRecord.model_validate(pending) if pending else None
    claims = decision_claims(
        tenant=tenant or client.namespace, run=run,
        run_id=run_id or (shown.run_id if shown else "not-started"),
        gate=gate or (pending["gate"] if pending else "refund_review"),
        request=request if request is not None else (pending["step"] if pending else 1),
        proposal=proposal or (proposal_digest(shown) if shown else NO_PROPOSAL),
        verdict=verdict.value, sub=approver, role=role, edits=edits or {}, note=note,
        jti=decision_id or new_id("d"), lifetime=lifetime,
        now=time.time() if now is None else now)
    if unsigned:
        return {"unsigned": claims.model_dump(mode="json")}
    return {"token": sign(claims, key or load_key(approver))}


def signed_event(client: Client, run: str, event: dict[str, Any], *,
                 sender: str = "ops-bot", agent: str = "lifecycle") -> dict[str, Any]:
    """An event for ``run`` signed by ``sender``'s own key (docs/approvals.md)."""
    now = int(time.time())
    claims = EventClaims(tenant=client.namespace, run=run, agent=agent, sub=sender,
                         event=event, jti=new_id("e"), iat=now, exp=now + 600)
    return {"token": sign(claims, load_key(sender), typ=EVENT_TYPE)}


def tamper(message: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The same token with its claims changed and its signature kept (a forgery)."""
    header, payload, signature = message["token"].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps(claims | changes).encode()).rstrip(b"=")
    return {"token": f"{header}.{forged.decode()}.{signature}"}


def forged_key(approver: str = "alice") -> dict[str, Any]:
    """A key that claims to be ``approver``'s (same key id) but is not."""
    return {**new_key(), "kid": load_key(approver)["kid"]}


async def decide(client: Client, handle: WorkflowHandle[Any, Any],
                 pending: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    """Answer the run's gate with a signed decision (see ``decision``): the update's reply,
    sent again as ``tower approve`` does when the server aborted it with its workflow task."""
    outcome = await submit_decision(handle, decision(client, handle.id, pending, **kw))
    return outcome.model_dump(mode="json")


async def wait_pending(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> dict[str, Any]:
    """The run's approvals once a request is pending and the gate's own activities (its
    attestation, the approvers' notice) have finished: from then on only what comes from
    outside adds to the history."""
    async with asyncio.timeout(timeout):
        seen = -1
        while True:
            try:
                info: dict[str, Any] = await handle.query("approvals", result_type=dict)
            except WorkflowQueryFailedError as exc:  # the tests' client has no TowerPlugin,
                if AHEAD_OF_ITS_TASK not in str(exc):  # which asks such a query again
                    raise
                await asyncio.sleep(0.3)
                continue
            described = (await handle.describe()).raw_description
            length = described.workflow_execution_info.history_length
            # Settled: waiting, nothing of its own in flight, and the history still since the
            # last look (the attestation's memo follows the request's by a task).
            if info["pending"] and not described.pending_activities and length == seen:
                return info
            seen = length
            await asyncio.sleep(0.3)


# A workflow task's own events record no decision; the server may add them at any time
# (a rejected update's speculative task is kept when it times out under load).
TASK_BOOKKEEPING = {EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
                    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
                    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
                    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT}


async def recorded(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The run's history minus workflow-task bookkeeping: what a refusal must not change."""
    history = await handle.fetch_history()
    return [e.event_type for e in history.events if e.event_type not in TASK_BOOKKEEPING]


# What a decision refused for what the run's roster says (a key id it does not name, a
# role it does not grant) adds to the history: the update, taken, and the roster read it
# waited for before it was refused, with the timers of the wait (at most one read per
# REFRESH_GAP; tower/temporal/_gate.py).
ROSTER_RECHECK = {EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
                  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
                  EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
                  EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED,
                  EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
                  EventType.EVENT_TYPE_TIMER_STARTED, EventType.EVENT_TYPE_TIMER_FIRED,
                  EventType.EVENT_TYPE_TIMER_CANCELED}


async def roster_reads(handle: WorkflowHandle[Any, Any]) -> int:
    """How many times the run read its roster (``load_trust``)."""
    history = await handle.fetch_history()
    return sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes")
               and e.activity_task_scheduled_event_attributes.activity_type.name == "load_trust")


async def snapshot(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    state: dict[str, Any] = await handle.query("state", result_type=dict)
    return state


def refunds(db_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute("SELECT invoice_id, amount_cents FROM refunds").fetchall()


SHOP_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, fax TEXT);
CREATE TABLE legacy_notes (id INTEGER PRIMARY KEY, body TEXT);
INSERT INTO customers (name, fax) VALUES ('Ada', '555-0100'), ('Grace', NULL);
INSERT INTO legacy_notes (body) VALUES ('keep me?');
"""


def make_shop(tools_db: Path) -> Path:
    """A real application database for migrations, beside the tools' database."""
    path = tools_db.parent / "databases" / "shop.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a new tools database made the example one: start afresh
    with sqlite3.connect(path) as db:
        db.executescript(SHOP_SCHEMA)
    return path


def schema(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE "
                          "'sqlite_%' AND name != '_tower_migrations' ORDER BY name").fetchall()


# The server fails a task in flight itself when signals arrive meanwhile: more than 100
# (history.maximumBufferedEventsBatch), or any while the task closes the run (continue-as-
# new). Then it hands the worker a fresh task holding them; the worker did nothing wrong.
SERVER_SIDE = (WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
               WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND)


def task_failures(history: Any) -> list[str]:
    """The workflow tasks the worker failed (a deadlock, an exception in a handler...)."""
    return [f"{WorkflowTaskFailedCause.Name(a.cause)}: {a.failure.message}"
            for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
            for a in [e.workflow_task_failed_event_attributes] if a.cause not in SERVER_SIDE]


def in_process_tools(db: Path) -> dict[str, Any]:
    """The example's real tools on their own database, answering in-process (no activity),
    a refusal reported as the worker's context reports it (EffectRefused)."""
    from temporalio.exceptions import ApplicationError

    from activities.tools import TOOLS, ToolsDb
    from tower.contract.failures import EffectRefused
    from tower.contract.wire import ToolCall

    box, keys = ToolsDb(db), itertools.count()

    def answer(name: str) -> Any:
        def call(args: dict[str, Any], authority: Any) -> dict[str, Any]:
            try:
                return box.call(TOOLS[name], ToolCall(
                    tool=name, arguments=args, idempotency_key=f"test/{next(keys)}",
                    authority=authority))
            except ApplicationError as exc:
                refused = rebuilt(exc)
                if not isinstance(refused, EffectRefused):
                    raise
                raise EffectRefused(refused.code, refused.reason, tool=name) from None
        return call

    return {name: answer(name) for name, tool in TOOLS.items() if not tool.control}
