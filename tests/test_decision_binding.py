"""What you see is what you sign, on the real dev server: a decision names the Temporal run
id and the proposal it was made for, and only a run's own continue-as-new carries state.

Each attack: refused, nothing paid (the tools' SQLite), the run's state unchanged, and a
genuine decision for what is pending still works afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, new_id, refund_request, refunds, snapshot, wait_pending
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ContinueAsNewInitiator, EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy

from tower.activities.model import ModelSettings
from tower.client import DecisionRefused
from tower.client._decisions import send_decision
from tower.client.keys import new_key
from tower.contract.decisions import GateRecord, proposal_digest
from tower.contract.failures import Code
from tower.contract.trust import Member, Policy, Roster
from tower.core.signing import public_of
from worker import build_worker
from workflows.refund import RefundAgent, RefundState

pytestmark = pytest.mark.integration

TWO_THOUSAND = 200_000


def worker(client: Client, task_queue: str, db_path: Path) -> Any:
    return build_worker(client, task_queue=task_queue, db_path=db_path,
                        models=ModelSettings())


async def refused(handle: Any, payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("decide", payload, result_type=dict)
    return str(getattr(info.value.cause, "message", info.value.cause))


async def refused_both_ways(handle: Any, payload: dict[str, Any]) -> str:
    """Sent as the update and as a signal: both refused, the signal into the audit trail."""
    reason = await refused(handle, payload)
    total = (await handle.query("approvals", result_type=dict))["refused_total"]
    await handle.signal("decision", payload)
    async with asyncio.timeout(30):
        while (audit := await handle.query("approvals", result_type=dict))[
                "refused_total"] == total:
            await asyncio.sleep(0.1)
    assert audit["refused"][-1]["reason"] == reason
    return reason


def pay_elsewhere(db_path: Path, cents: int) -> None:
    """Someone else refunds part of INV-2004 meanwhile (the world changes)."""
    with sqlite3.connect(db_path) as db:
        db.execute("INSERT INTO refunds VALUES (?, 'INV-2004', ?, 'x', ?)",
                   (f"rf_{uuid.uuid4().hex[:6]}", cents, f"k-{uuid.uuid4().hex[:6]}"))


async def test_a_kept_token_of_a_look_alike_run_is_refused(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """The approver approves a $5 request; its run is ended, a $2,400 refund starts under the
    same workflow id and parks at the same gate and step; the kept token is refused."""
    run = new_id("refund")
    async with worker(client, task_queue, db_path):
        small = await client.start_workflow(
            RefundAgent.run, refund_request(client, run, message="Please refund $5 on "
                                            "invoice INV-2004", limit_cents=100),
            id=run, task_queue=task_queue)
        shown = (await wait_pending(small))["pending"]
        assert shown["proposal"]["amount_cents"] == 500
        kept = decision(client, run, shown, decision_id="d-kept")
        await small.terminate("the attacker ends the look-alike")
        big = await client.start_workflow(
            RefundAgent.run, refund_request(client, run, message="Please refund $2,400 on "
                                            "invoice INV-2004"), id=run, task_queue=task_queue)
        pending = (await wait_pending(big))["pending"]
        assert (pending["gate"], pending["step"]) == (shown["gate"], shown["step"])
        assert pending["run_id"] == big.result_run_id != shown["run_id"]
        before = await snapshot(big)
        assert f"made for run id {shown['run_id']}" in await refused_both_ways(big, kept)
        # The same approver's key, the same request step, the big run's id: still the
        # proposal it was not shown.
        moved = decision(client, run, pending, proposal=_digest(shown), decision_id="d-moved")
        assert "another proposal" in await refused_both_ways(big, moved)
        assert await snapshot(big) == before and refunds(db_path) == []
        out = await big.execute_update("decide", decision(client, run, pending), result_type=dict)
        state = await big.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 240000)]


async def test_a_token_for_another_workflow_is_refused_as_wrong_run(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Two refunds park at the same gate and step. A genuine token for A, sent to B as
    an update and as a signal, is refused with WRONG_RUN (the run is bound by the run id
    its request was opened in, not by the workflow id replay may change); B's own pays."""
    async with worker(client, task_queue, db_path):
        a, b = [await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                            id=new_id("refund"), task_queue=task_queue)
                for _ in range(2)]
        for_a, pending = [(await wait_pending(h))["pending"] for h in (a, b)]
        assert (for_a["gate"], for_a["step"]) == (pending["gate"], pending["step"])
        stolen = decision(client, a.id, for_a, decision_id="d-stolen")
        before = await snapshot(b)
        with pytest.raises(DecisionRefused) as info:
            await send_decision(client, b.id, stolen)
        assert info.value.code == Code.WRONG_RUN
        reason = await refused_both_ways(b, stolen)
        assert f"is for run {a.id!r}, made for run id {for_a['run_id']}" in reason
        refused = (await b.query("approvals", result_type=dict))["refused"]
        assert [r["code"] for r in refused] == ["wrong_run"]
        assert await snapshot(b) == before and refunds(db_path) == []
        await a.terminate("test over")
        out = await b.execute_update("decide", decision(client, b.id, pending),
                                     result_type=dict)
        await b.result()
    assert out["result"] == "approved" and refunds(db_path) == [("INV-2004", 120000)]


def _digest(pending: dict[str, Any]) -> str:
    return proposal_digest(GateRecord.model_validate(pending))


async def test_a_decision_from_before_a_reset_is_refused(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """A run is approved and pays $1,200; it is reset to its start and, the invoice having
    changed, the model proposes $700 at the same step. The earlier decision (read from the
    history; the reset also re-applies its signal) is refused; a new one pays $700."""
    async with worker(client, task_queue, db_path):
        first = await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                            id=new_id("refund"), task_queue=task_queue)
        shown = (await wait_pending(first))["pending"]
        earlier = decision(client, first.id, shown, decision_id="d-earlier")
        await first.signal("decision", earlier)
        await first.result()
        assert refunds(db_path) == [("INV-2004", 120000)]
        pay_elsewhere(db_path, 50_000)  # $2,400 - $1,200 - $500: $700 refundable now
        history = await first.fetch_history()
        start_task = next(e.event_id for e in history.events if e.event_type
                          == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        reset = await client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=client.namespace, reason="test: reset before the gate",
                workflow_execution=WorkflowExecution(workflow_id=first.id,
                                                     run_id=first.result_run_id or ""),
                workflow_task_finish_event_id=start_task, request_id=str(uuid.uuid4())))
        again = client.get_workflow_handle(first.id, run_id=reset.run_id,
                                           result_type=RefundState)
        info = await wait_pending(again)
        pending = info["pending"]
        assert (pending["step"], pending["proposal"]["amount_cents"]) == (shown["step"], 70000)
        assert pending["run_id"] == reset.run_id != shown["run_id"]
        # The signal the reset re-applied reached the new run before its gate: refused.
        assert [r["reason"] for r in info["refused"]] == [
            "the run is not awaiting a decision: it has not started yet"]
        before, paid = await snapshot(again), refunds(db_path)
        assert "made for run id" in await refused_both_ways(again, earlier)
        assert await snapshot(again) == before and refunds(db_path) == paid
        out = await again.execute_update("decide", decision(client, first.id, pending),
                                         result_type=dict)
        state = await again.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert sorted(refunds(db_path)) == [("INV-2004", 50000), ("INV-2004", 70000),
                                        ("INV-2004", 120000)]


async def test_a_token_for_a_replanned_proposal_is_refused(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Approved at $1,200, the re-check finds less refundable and the run plans $900 anew.
    A second approver's token for the $1,200 request, and one naming the new request but
    the proposal its signer saw, are refused; a decision on the $900 pays $900."""
    async with worker(client, task_queue, db_path):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                             id=new_id("refund"), task_queue=task_queue)
        shown = (await wait_pending(handle))["pending"]
        second_look = decision(client, handle.id, shown, decision_id="d-second-look")
        pay_elsewhere(db_path, 150_000)
        out = await handle.execute_update("decide", decision(client, handle.id, shown),
                                          result_type=dict)
        assert out["result"] == "stale"
        pending = (await wait_pending(handle))["pending"]
        assert pending["proposal"]["amount_cents"] == 90000 and pending["run_id"] == \
            shown["run_id"]
        before, paid = await snapshot(handle), refunds(db_path)
        assert "the pending request was opened at step" in await refused_both_ways(
            handle, second_look)
        # The new request's step and run id, the old proposal's digest (a page kept open).
        stale_page = decision(client, handle.id, pending, proposal=_digest(shown),
                              decision_id="d-stale-page")
        assert "another proposal" in await refused_both_ways(handle, stale_page)
        assert await snapshot(handle) == before and refunds(db_path) == paid
        out = await handle.execute_update("decide", decision(client, handle.id, pending),
                                          result_type=dict)
        state = await handle.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert sorted(refunds(db_path)) == [("INV-2004", 90000), ("INV-2004", 150000)]


def forged_carry(run_id: str = "forged") -> dict[str, Any]:
    """A "continued" refund input: past the reasoning, $2,000 under a 1e9 limit, with a
    roster of the requester's choosing and unsigned decisions on."""
    roster = Roster(tenant="default", members=[Member(
        name="mallory", roles=["manager"], keys=[public_of(new_key("mallory-1"))])])
    return {"message": "Please refund $2,000 on invoice INV-2004", "carry": {
        "run_id": run_id, "log": {},
        "trust": {"roster": roster.model_dump(mode="json"), "digest": "forged",
                  "policy": Policy(tenant="default", unsigned_allowed=True).model_dump()},
        "state": {"limit_cents": 10**9, "review_timeout_seconds": 60, "node": "issue_refund",
                  "step": 2, "visits": {"reason": 1, "issue_refund": 1},
                  "invoice_id": "INV-2004", "amount_cents": TWO_THOUSAND,
                  "planned_cents": TWO_THOUSAND, "refund_reason": "forged"}}}


async def closed_run(client: Client, workflow_id: str, run_id: str) -> Any:
    """The closing event of one run of ``workflow_id`` (a cron chain goes on after it)."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    async with asyncio.timeout(120):
        while True:
            events = (await handle.fetch_history()).events
            if events[-1].event_type in (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
                                         EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
                                         EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT):
                return events[0], events[-1]
            await asyncio.sleep(0.2)


async def test_a_cron_start_pays_nothing_without_a_decision(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """A raw start on a cron schedule with a forged carry: Temporal marks the second run
    continued (initiator CRON_SCHEDULE) and hands it the requester's input again. Every
    run fails at once with the reason; nothing is paid. A genuine run still works."""
    run = new_id("cron")
    async with worker(client, task_queue, db_path):
        handle = await client.start_workflow("refund", forged_carry(), id=run,
                                             task_queue=task_queue, cron_schedule="@every 1s")
        started, closed = await closed_run(client, run, handle.result_run_id or "")
        failed = closed.workflow_execution_failed_event_attributes
        assert "refuses a cron schedule" in failed.failure.message
        second = failed.new_execution_run_id
        started, closed = await closed_run(client, run, second)
        attrs = started.workflow_execution_started_event_attributes
        assert attrs.continued_execution_run_id == handle.result_run_id
        assert attrs.initiator == ContinueAsNewInitiator.CONTINUE_AS_NEW_INITIATOR_CRON_SCHEDULE
        assert "refuses a cron schedule" in \
            closed.workflow_execution_failed_event_attributes.failure.message
        await client.get_workflow_handle(run).terminate("test over")
        assert refunds(db_path) == []
        genuine = await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                              id=new_id("refund"), task_queue=task_queue)
        pending = (await wait_pending(genuine))["pending"]
        out = await genuine.execute_update("decide", decision(client, genuine.id, pending),
                                           result_type=dict)
        await genuine.result()
    assert out["result"] == "approved" and refunds(db_path) == [("INV-2004", 120000)]


async def test_a_retried_start_does_not_take_its_forged_carry(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """A raw start with a retry policy: its first run times out before any worker sees it,
    and Temporal retries it as a run continued from the one before, with the same input.
    The carry names no run it could have come from: the retry fails at once, nothing paid."""
    run = new_id("retry")
    handle = await client.start_workflow(
        "refund", forged_carry(), id=run, task_queue=task_queue,
        run_timeout=timedelta(seconds=3), retry_policy=RetryPolicy(maximum_attempts=4))
    _, closed = await closed_run(client, run, handle.result_run_id or "")
    assert closed.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT
    async with worker(client, task_queue, db_path):
        while closed.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            # A retry may time out too while the worker starts: follow the chain.
            retry_run = closed.workflow_execution_timed_out_event_attributes.new_execution_run_id
            assert retry_run, "every attempt timed out before the worker took one"
            started, closed = await closed_run(client, run, retry_run)
            continued = started.workflow_execution_started_event_attributes
            assert continued.continued_execution_run_id  # Temporal marks a retry continued
    message = closed.workflow_execution_failed_event_attributes.failure.message
    assert (f"continued from run {continued.continued_execution_run_id}, the carry names "
            "run forged") in message
    assert refunds(db_path) == []
    with pytest.raises(WorkflowFailureError):
        await client.get_workflow_handle(run).result()
