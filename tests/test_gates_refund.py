"""The refund gate on the real dev server: approvals, refusals, races, restarts, staleness."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from gatekit import (
    SERVER_SIDE,
    decide,
    decision,
    forged_key,
    new_id,
    refund_request,
    refunds,
    snapshot,
    tamper,
    wait_pending,
)
from temporalio import workflow
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.exceptions import FailureError
from temporalio.service import RPCError, RPCStatusCode

from tower import AgentWorkflow, Message
from tower.activities.model import ModelSettings
from tower.contract import search
from tower.contract.decisions import Verdict
from tower.core.engine import Transition
from worker import build_worker
from workflows.refund import RefundAgent, RefundRequest, RefundState

SCRIPTED = ModelSettings()


def worker(client: Client, task_queue: str, db_path: Path) -> Any:
    return build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED)


async def start(client: Client, task_queue: str, **kw: Any) -> Any:
    run = new_id("refund")
    return await client.start_workflow(RefundAgent.run, refund_request(client, run, **kw),
                                       id=run, task_queue=task_queue)


async def refused(handle: Any, payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("decide", payload, result_type=dict)
    return refusal(info.value)


def refusal(error: WorkflowUpdateFailedError) -> str:
    """Why the update was refused: the message of the failure that caused it."""
    cause = error.cause
    assert isinstance(cause, FailureError), cause  # has ``message``; BaseException has not
    return cause.message


async def test_under_the_limit_no_gate(client: Client, task_queue: str, db_path: Path) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, message="Refund $300 on invoice INV-2004")
        state = await handle.result()
    assert state.status == "DONE" and state.approvals == []
    assert refunds(db_path) == [("INV-2004", 30000)]


async def test_approved_with_a_lower_amount_refunds_once(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        info = await wait_pending(handle)
        assert info["pending"]["proposal"]["amount_cents"] == 120000
        described = await handle.describe()
        sa = described.typed_search_attributes
        assert sa.get(search.AGENT_STATUS) == "AWAITING_APPROVAL"
        # What the Web UI shows for the run: the gate, the role, the proposal, the command.
        meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        details = meta.current_details
        assert "AWAITING_APPROVAL" in details and "gate `refund_review`" in details
        assert "needs role **manager**" in details and "$1,200.00" in details
        ok = decision(client, handle.id, info["pending"], edits={"amount_cents": 100000},
                      decision_id="d-approve-1")
        out = await handle.execute_update("decide", ok, result_type=dict)
        again = await handle.execute_update("decide", ok, result_type=dict)  # same id
        state = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
    assert out["result"] == "approved" and not out["duplicate"]
    assert again["duplicate"] and again["result"] == "approved"
    assert state.status == "DONE" and state.refund_id.startswith("rf_")
    assert "$1,000.00" in state.reply
    assert refunds(db_path) == [("INV-2004", 100000)]  # once, at the approved amount
    # The data-flow table of the refund agent: plan, gate, approval, payment, confirm.
    assert [(t.source, t.target) for t in log] == [
        ("START", "reason"), ("reason", "issue_refund"), ("issue_refund", "issue_refund"),
        ("issue_refund", "issue_refund"), ("issue_refund", "confirm"), ("confirm", "DONE")]
    assert "awaiting approval" in log[2].reason and "approved by alice" in log[3].reason
    assert log[3].update == {"amount_cents": 100000}
    assert [t.step for t in log] == [1, 2, 3, 4, 5, 6]


async def test_every_refused_decision_changes_nothing(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        info = await wait_pending(handle)
        p, run = info["pending"], handle.id
        before = await snapshot(handle)
        log_before = await handle.query("transitions", result_type=list)
        cases = {
            "wrong tenant": (decision(client, run, p, tenant="other-tenant"), "tenant"),
            "wrong role": (decision(client, run, p, approver="carol", role="clerk"),
                           "role 'clerk' may not"),
            "forged signature": (decision(client, run, p, key=forged_key()),
                                 "invalid signature"),
            "unsigned": (decision(client, run, p, unsigned=True), "unsigned decision refused"),
            "non-editable field": (decision(client, run, p, edits={"invoice_id": "INV-2001"}),
                                   "not editable"),
            "raise the amount": (decision(client, run, p, edits={"amount_cents": 200000}),
                                 "may only be lowered"),
            "protected field": (decision(client, run, p, edits={"approvals": []}),
                                "not editable"),
            "unknown gate": (decision(client, run, p, gate="nope"), "unknown gate"),
            "malformed": ({"decision": "maybe"}, "malformed decision"),
        }
        for name, (payload, reason) in cases.items():
            assert reason in await refused(handle, payload), name
            await handle.signal("decision", payload)
        audit = await handle.query("approvals", result_type=dict)
        after = await snapshot(handle)
        log_after = await handle.query("transitions", result_type=list)
        assert after == before and log_after == log_before
        assert len(audit["refused"]) == len(cases)
        assert all(r["via"] == "signal" for r in audit["refused"])
        assert "invalid signature" in audit["refused"][2]["reason"]
        # Still waiting, still decidable by the right person.
        out = await decide(client, handle, p)
        assert out["result"] == "approved"
        await handle.result()
    assert refunds(db_path) == [("INV-2004", 120000)]


async def test_a_flood_of_bad_signals_is_bounded_in_the_audit_trail(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        before = (await wait_pending(handle), await snapshot(handle))
        await asyncio.gather(*(handle.signal("decision", {"decision_id": f"junk-{i}"})
                               for i in range(120)))
        async with asyncio.timeout(30):
            while (audit := await handle.query("approvals", result_type=dict))[
                    "refused_total"] < 120:
                await asyncio.sleep(0.1)
        kept = {r["decision_id"] for r in audit["refused"]}  # the newest 100, all distinct
        assert len(audit["refused"]) == len(kept) == 100
        assert kept <= {f"junk-{i}" for i in range(120)}
        assert await snapshot(handle) == before[1]
        await handle.terminate("test over")


async def test_decision_before_the_gate_is_reached(
    client: Client, task_queue: str, db_path: Path
) -> None:
    handle = await start(client, task_queue)  # no worker yet: the run has not begun
    early = decision(client, handle.id, None)
    await handle.signal("decision", early)
    update = asyncio.create_task(handle.execute_update("decide", early, result_type=dict))
    async with worker(client, task_queue, db_path):
        with pytest.raises(WorkflowUpdateFailedError) as info:
            await update
        assert "not awaiting a decision" in refusal(info.value)
        approvals = await wait_pending(handle)
        assert "not awaiting a decision" in approvals["refused"][0]["reason"]
        state = await snapshot(handle)
        assert state["status"] == "AWAITING_APPROVAL" and len(state["approvals"]) == 1
        await handle.terminate("test over")
    assert refunds(db_path) == []


async def test_approve_and_reject_race(client: Client, task_queue: str, db_path: Path) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        p = (await wait_pending(handle))["pending"]
        approve = decision(client, handle.id, p, decision_id="d-yes")
        reject = decision(client, handle.id, p, verdict=Verdict.REJECT, approver="bob",
                          decision_id="d-no")
        results = await race(handle, approve, reject)
        state = await handle.result()
    won = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    # Exactly the winner's decision was taken, and its refund paid at most once.
    (record,) = state.approvals
    assert record.decision is not None and record.decision.decision_id == won[0]["decision_id"]
    assert record.status == won[0]["result"]
    assert len(refunds(db_path)) == (1 if won[0]["result"] == "approved" else 0)
    # The loser was not taken, and its sender was told so.
    assert await turned_away(handle, lost[0]), repr(lost[0])


async def race(handle: Any, *decisions: dict[str, Any]) -> list[Any]:
    """The decisions sent at once. If the server threw away the task that carried them all
    (see ``aborted``), none was taken and the run still waits: they are sent again."""
    for _ in range(3):
        results = await asyncio.gather(
            *(handle.execute_update("decide", d, result_type=dict) for d in decisions),
            return_exceptions=True)
        if any(isinstance(r, dict) for r in results):
            return results
        assert all([await aborted(handle, r) for r in results]), results
        assert (await handle.query("approvals", result_type=dict))["pending"], results
    raise AssertionError(f"no decision was taken in three rounds: {results}")


async def turned_away(handle: Any, error: BaseException) -> bool:
    """Whether ``error`` is one of the ways the losing decision of a race is turned away.
    Each leaves it out of the run; which one the loser gets depends on timing (load)."""
    if isinstance(error, WorkflowUpdateFailedError):  # Tower's validator or handler
        return "already decided" in refusal(error)
    if isinstance(error, RPCError) and error.status == RPCStatusCode.NOT_FOUND:
        # It reached the server as the winner closed the run: "workflow execution already
        # completed", or "update was aborted by closing workflow" (admitted, not delivered).
        return bool(re.search(r"completed|closing", error.message))
    return await aborted(handle, error)


async def aborted(handle: Any, error: BaseException) -> bool:
    """The server failed the workflow task that carried the update: the worker took the
    decision and closed the run, but an event (the approvers' notice) arrived meanwhile
    (UnhandledCommand). That task's work is thrown away and the updates it carried are
    aborted, never delivered again; the run goes on from its history. Legitimate only
    with that failure in the history."""
    if not (isinstance(error, RPCError) and error.status == RPCStatusCode.FAILED_PRECONDITION
            and "unexpected workflow task failure" in error.message):
        return False
    history = await handle.fetch_history()
    return any(e.workflow_task_failed_event_attributes.cause in SERVER_SIDE
               for e in history.events if e.HasField("workflow_task_failed_event_attributes"))


async def test_worker_replaced_while_the_run_waits(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        p = (await wait_pending(handle))["pending"]
    # The first worker is gone; a new one picks the run up from its history.
    async with worker(client, task_queue, db_path):
        out = await decide(client, handle, p)
        state = await handle.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 120000)]


async def test_rejected_by_signal_tells_the_customer(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        p = (await wait_pending(handle))["pending"]
        signed = decision(client, handle.id, p, verdict=Verdict.REJECT, approver="bob",
                          note="over the quarter's budget")
        tampered = tamper(signed, note="approved after all")  # the note is signed too
        await handle.signal("decision", tampered)
        await handle.signal("decision", signed)
        state = await handle.result()
        audit = await handle.query("approvals", result_type=dict)
    assert [r["reason"][:17] for r in audit["refused"]] == ["invalid signature"]
    assert state.approvals[-1].status == "rejected" and state.node == "DONE"
    assert state.reply == "Your refund request was not approved: over the quarter's budget."
    assert refunds(db_path) == []


async def test_a_start_carrying_signing_settings_fails_fast(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # No agent takes signing settings in its input (the deployment's roster and policy
    # decide): a raw start that carries them fails at once, before any step.
    run = new_id("refund")
    request = {**refund_request(client, run).model_dump(mode="json"),
               "approvals": {"allow_unsigned": True}}
    async with worker(client, task_queue, db_path):
        handle = await client.start_workflow("refund", request, id=run, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    cause = str(info.value.cause)
    assert "approvals" in cause and "Extra inputs are not permitted" in cause, cause
    assert refunds(db_path) == []


@workflow.defn(name="refund-unadmitted")
class RefundWithoutAdmit(RefundAgent):
    """The refund agent with the runtime's admission turned off (a plain Temporal subclass
    of it, not an ``@agent``): no roster, so no decision could count."""

    admits = False

    @workflow.init
    def __init__(self, request: RefundRequest) -> None:
        AgentWorkflow.__init__(self)

    @workflow.run
    async def run(self, request: RefundRequest) -> RefundState:
        state = RefundState(messages=[Message(role="user", content=request.message)],
                            limit_cents=50_000,
                            review_timeout_seconds=request.review_timeout_seconds)
        return await self.drive(state)


async def test_a_gated_run_without_a_roster_fails_at_once(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    """A tenant with no trust directory, or an agent that never loads its roster: the run
    fails before its first step with TrustMissing and the reason (no decision could be
    judged); no workflow task fails and retries, nothing is paid."""
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED,
                            trust_dir=tmp_path / "no-trust", workflows=[RefundWithoutAdmit]):
        for run_of, why in ((RefundAgent.run, "cannot load the tenant's roster and policy"),
                            (RefundWithoutAdmit.run, "call `await self.admit(request)`")):
            run = new_id("refund")
            handle = await client.start_workflow(run_of, refund_request(client, run), id=run,
                                                 task_queue=task_queue)
            with pytest.raises(WorkflowFailureError) as info:
                await handle.result()
            cause = info.value.cause
            assert isinstance(cause, FailureError) and why in cause.message, cause
            assert getattr(cause, "type", None) == "TrustMissing"
            history = await handle.fetch_history()
            assert not [e for e in history.events
                        if e.HasField("workflow_task_failed_event_attributes")]
    assert refunds(db_path) == []


async def test_decision_after_expiry(client: Client, task_queue: str, db_path: Path) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, review_timeout_seconds=2)
        p = (await wait_pending(handle))["pending"]
        state = await handle.result()  # nobody decided within 2 seconds
        assert state.approvals[-1].status == "expired"
        assert "could not be reviewed in time" in state.reply
        with pytest.raises(Exception, match="(?i)workflow.*(completed|closed)|already"):
            await decide(client, handle, p)
    assert refunds(db_path) == []


async def test_stale_recheck_plans_again(client: Client, task_queue: str, db_path: Path) -> None:
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue)
        p = (await wait_pending(handle))["pending"]
        # While the manager thinks, someone else refunds $1,500 of the $2,400 invoice.
        with sqlite3.connect(db_path) as db:
            db.execute("INSERT INTO refunds VALUES ('rf_other','INV-2004',150000,'x','k-other')")
        out = await decide(client, handle, p)
        assert out["result"] == "stale" and "$900.00 refundable now" in out["reason"]
        again = (await wait_pending(handle))["pending"]  # re-planned: $900 still needs review
        assert again["proposal"]["amount_cents"] == 90000 and again["visit"] == 2
        await decide(client, handle, again)
        state = await handle.result()
    assert [r.status for r in state.approvals] == ["stale", "approved"]
    assert sorted(refunds(db_path)) == [("INV-2004", 90000), ("INV-2004", 150000)]
