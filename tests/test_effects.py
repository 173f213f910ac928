"""Issue 13's three reproductions, on the real dev server and the real SQLite store:
racing approvals cannot overdraw an invoice, an amount under the limit is still checked,
and a tool the run gave up on can neither pay behind its back nor make a retry pay twice.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, refunds, send_retry, snapshot, wait_pending
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from activities.tools import billing
from tower.activities.model import ModelSettings
from tower.contract.decisions import Verdict
from tower.contract.wire import ModelRequest, ToolCallRequest
from worker import build_worker
from workflows.refund import RefundAgent, RefundState


def worker(client: Client, task_queue: str, db_path: Path) -> Any:
    return build_worker(client, task_queue=task_queue, db_path=db_path, models=ModelSettings())


def add_invoice(db_path: Path, invoice: str, cents: int) -> None:
    worker_db = sqlite3.connect(db_path)  # the worker created and seeded it
    with worker_db:
        worker_db.execute("INSERT INTO invoices VALUES (?, 'ACC-1001', ?, 'paid', '2026-11-20')",
                          (invoice, cents))
    worker_db.close()


async def start(client: Client, task_queue: str, message: str) -> WorkflowHandle[Any, Any]:
    run = new_id("refund")
    return await client.start_workflow(RefundAgent.run, refund_request(client, run,
                                                                       message=message),
                                       id=run, task_queue=task_queue)


async def settled(handle: WorkflowHandle[Any, Any], timeout: float = 60) -> dict[str, Any]:
    """The run's state once it is DONE, FAILED or waiting at a gate."""
    async with asyncio.timeout(timeout):
        while True:
            state = await snapshot(handle)
            if state.get("status") in ("DONE", "FAILED", "AWAITING_APPROVAL"):
                return state
            await asyncio.sleep(0.2)


async def test_racing_approvals_cannot_overdraw_an_invoice(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Four approved $4,000 refunds on a $10,000 invoice: at most $10,000 is paid, and the
    runs the payment tool refused go back to plan against what is left."""
    async with worker(client, task_queue, db_path):
        add_invoice(db_path, "INV-3001", 1_000_000)
        runs = [await start(client, task_queue, "Please refund $4,000 on invoice INV-3001")
                for _ in range(4)]
        pending = [await wait_pending(h) for h in runs]
        await asyncio.gather(*(decide(client, h, p["pending"]) for h, p in zip(runs, pending,
                                                                                strict=True)))
        states = [await settled(h) for h in runs]
        paid = sum(cents for _, cents in refunds(db_path))
        assert paid <= 1_000_000, f"refunded ${paid / 100:,.2f} on a $10,000 invoice"
        assert paid == 800_000  # two of four were paid; the others saw $2,000 left
        assert sorted(s["status"] for s in states).count("DONE") == 2
        for handle, state in zip(runs, states, strict=True):  # the rest plan again: reject
            if state["status"] == "AWAITING_APPROVAL":
                assert state["amount_cents"] == 200_000 and state["refund_id"] == ""
                info = await wait_pending(handle)
                await decide(client, handle, info["pending"], verdict=Verdict.REJECT)
        finals = [await handle.result() for handle in runs]
    assert all(s.status == "DONE" for s in finals)
    with sqlite3.connect(db_path) as db:  # each run's state agrees with the database
        ids = {row[0] for row in db.execute("SELECT id FROM refunds")}
    assert {s.refund_id for s in finals if s.refund_id} == ids and len(ids) == 2


async def test_a_model_asking_more_than_the_invoice_is_refused(
    client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model answering issue_refund with 49,999 cents on a $49 invoice (under the
    limit, so no gate): the payment tool refuses in its transaction; nothing is paid."""
    def greedy(request: ModelRequest) -> ToolCallRequest:
        return ToolCallRequest(name="issue_refund", arguments={
            "invoice_id": "INV-2001", "amount_cents": 49_999, "reason": "model says so"})

    monkeypatch.setitem(RefundAgent.scripts, "reason", greedy)  # type: ignore[attr-defined]
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, "Refund $49 on invoice INV-2001")
        state = await handle.result()
    assert refunds(db_path) == []
    assert state.status == "DONE" and state.refund_id == ""
    assert state.reply.startswith("Your refund could not be issued") and "$49.00" in state.reply
    assert state.refused_code == "over_refundable"


def lock_refunds(db_path: Path) -> sqlite3.Connection:
    """Another writer holding the tools' database (a long report, a stuck migration)."""
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


async def wait_for_activity(handle: WorkflowHandle[Any, Any], name: str) -> None:
    async with asyncio.timeout(30):
        while True:
            pending = (await handle.describe()).raw_description.pending_activities
            if any(a.activity_type.name == name for a in pending):
                return
            await asyncio.sleep(0.2)


async def wait_for_reconcile(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the run reconciles: the tool's own activity, scheduled a second time (with
    ``reconcile=True``), is pending."""
    async with asyncio.timeout(30):
        while True:
            scheduled = [e for e in (await handle.fetch_history()).events
                         if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                         and e.activity_task_scheduled_event_attributes.activity_type.name
                         == "issue_refund"]
            if len(scheduled) >= 2:
                return
            await asyncio.sleep(0.2)


async def test_a_tool_given_up_on_pays_never_and_a_retry_pays_once(
    client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database is locked past the tool's timeout and its only attempt: the run gives
    up, reconciles by key (blocked until the lock goes), finds no refund and ends FAILED —
    and the refund cannot appear afterwards. The operator's retry then pays exactly once."""
    monkeypatch.setattr(billing.issue_refund, "timeout_seconds", 2)
    monkeypatch.setattr(billing.issue_refund, "attempts", 1)
    async with worker(client, task_queue, db_path):
        holder = lock_refunds(db_path)
        try:
            handle = await start(client, task_queue, "Refund $300 on invoice INV-2004")
            await wait_for_reconcile(handle)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        state = await settled(handle)
        assert state["status"] == "FAILED" and state["refund_id"] == ""
        # FAILED after reconciling is a failed workflow execution, with the reason.
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert isinstance(failed.value.cause, ApplicationError)
        assert failed.value.cause.details[0]["node"] == "issue_refund"
        assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    # That worker has stopped, and a stopping worker waits until every activity function it
    # started has returned: no attempt that was given up on is still running anywhere.
    assert refunds(db_path) == [], "a refund appeared after the run gave up"
    async with worker(client, task_queue, db_path):
        await send_retry(client, handle.id, "issue_refund", "ops")
        done = await client.get_workflow_handle(handle.id, result_type=RefundState).result()
    assert done.status == "DONE" and done.refund_id
    assert refunds(db_path) == [("INV-2004", 30000)]


async def test_an_effect_made_after_the_timeout_is_found_not_lost(
    client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool commits after Temporal timed its attempt out: the run reconciles by key,
    finds the refund and follows the "refund issued" path — never FAILED with no
    refund_id while the refund exists."""
    pay = billing.issue_refund.fn

    def slow_refund(db: Any, args: Any, call: Any) -> dict[str, Any]:
        time.sleep(3)
        return pay(db, args, call)

    monkeypatch.setattr(billing.issue_refund, "fn", slow_refund)
    monkeypatch.setattr(billing.issue_refund, "timeout_seconds", 2)
    monkeypatch.setattr(billing.issue_refund, "attempts", 1)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, "Refund $300 on invoice INV-2004")
        state = await handle.result()
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT id, amount_cents FROM refunds").fetchall()
    assert rows == [(state.refund_id, 30000)] and state.status == "DONE"
