"""`tower inspect` and `tower fork` on real runs: running, closed, forked."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any, TypeVar

from gatekit import decide, decision, new_id, refund_request, refunds, wait_pending
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from test_cli import address_of, tower

from tower.activities.model import ModelSettings
from tower.client._decisions import submit_decision
from tower.contract.decisions import Verdict
from tower.temporal import TowerPlugin
from worker import build_worker
from workflows.account import AccountAgent, AccountRequest
from workflows.onboarding import OnboardingAgent, OnboardingRequest, OnboardingState
from workflows.refund import RefundAgent, RefundState
from workflows.registry import AGENTS

R = TypeVar("R")
SCHEDULED = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


async def events_of(handle: WorkflowHandle, kind: EventType.ValueType) -> list:
    return [e for e in (await handle.fetch_history()).events if e.event_type == kind]


async def wait_for_event(handle: WorkflowHandle, kind: EventType.ValueType) -> None:
    for _ in range(200):
        if await events_of(handle, kind):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id}: no {EventType.Name(kind)} event")


async def fork(address: str, client: Client, run: str, step: int, result_type: type[R],
               ) -> tuple[WorkflowHandle[Any, R], str]:
    """`tower fork RUN --step N`: the new run's handle, and what the command printed."""
    code, out, err = await tower(address, "fork", run, "--step", str(step))
    assert code == 0, err
    new_run_id = out.split("new run ", 1)[1].split()[0]
    return client.get_workflow_handle(run, run_id=new_run_id, result_type=result_type), out


async def test_inspect_running_and_closed_then_fork_without_later_signals(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
) -> None:
    address, run = address_of(env), f"account-{uuid.uuid4().hex[:8]}"
    # A worker with the workflows and no activities: the run's first model call stays
    # scheduled, so the run is in flight after step 1.
    async with Worker(client, task_queue=task_queue, workflows=list(AGENTS.values()),
                      plugins=[TowerPlugin(own_activities=False, tools=False)]):
        original = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"), id=run,
            task_queue=task_queue)
        await wait_for_event(original, SCHEDULED)
        await original.signal("nudge", "sent after step 1")  # a fork must not re-apply it
        await wait_for_event(original, SIGNALED)

        code, out, err = await tower(address, "inspect", run, "--step", "1")
        assert code == 0, err
        assert f"run {run} · agent account" in out and "now at reason (RUNNING, step 1)" in out
        assert re.search(r"^1 +START +reason ", out, re.M)
        state = json.loads(out.split("state after step 1:\n", 1)[1])
        assert state["step"] == 1 and state["messages"][0]["content"].endswith("ACC-1001")

        forked, out = await fork(address, client, run, 1, dict)
        assert "activities after the reset point run again" in out
        assert f"original run {original.result_run_id} keeps its history" in out
        new_run_id = forked.run_id

    assert new_run_id != original.result_run_id
    before = client.get_workflow_handle(run, run_id=original.result_run_id)
    assert (await before.describe()).status == WorkflowExecutionStatus.TERMINATED
    assert len(await events_of(before, SIGNALED)) == 1  # the original keeps its history
    assert await events_of(forked, SIGNALED) == []  # the decision is not re-applied

    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        state = await forked.result()
        assert state["status"] == "DONE" and "ACC-1001" in state["answer"]
        code, out, err = await tower(address, "inspect", run, "--step", "2")
        assert code == 0, err
        assert "now at DONE (DONE, step 4)" in out
        assert re.search(r"^4 +reason +DONE ", out, re.M)
        after_2 = json.loads(out.split("state after step 2:\n", 1)[1])
        assert after_2["pending_call"]["name"] == "lookup_account"

        # Forking a closed run at step 2 runs the tool call after it again.
        again, _ = await fork(address, client, run, 2, dict)
        assert (await again.result())["status"] == "DONE"
    names = [e.activity_task_scheduled_event_attributes.activity_type.name
             for e in await events_of(again, SCHEDULED)]
    assert names == ["call_model", "lookup_account", "call_model"]
    # ...and it ran after the reset point: the reset is recorded as a failed workflow task.
    events = (await again.fetch_history()).events
    reset_at = min(e.event_id for e in events
                   if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    lookup_at = min(e.event_id for e in events if e.event_type == SCHEDULED
                    and e.activity_task_scheduled_event_attributes.activity_type.name
                    == "lookup_account")
    assert reset_at < lookup_at


async def test_inspect_and_fork_refuse_bad_input(
    env: WorkflowEnvironment, client: Client, task_queue: str,
) -> None:
    address = address_of(env)
    # No worker: the first workflow task has not run, so no step has been made yet.
    waiting = await client.start_workflow(
        AccountAgent.run, AccountRequest(question="ACC-1001?"),
        id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    code, _, err = await tower(address, "inspect", waiting.id)
    assert code == 2 and "with no transitions yet" in err, err
    await waiting.terminate("test over")
    code, _, err = await tower(address, "inspect", "no-such-run")
    assert code == 2 and "run 'no-such-run' not found" in err
    history = str(Path(__file__).parent / "histories" / "account-2.json")
    code, out, err = await tower(address, "inspect", history, "--step", "99")
    assert code == 2 and "has no step 99" in err
    code, out, _ = await tower(address, "inspect", history, "--step", "11")
    assert code == 0 and "now at FAILED (FAILED, step 12)" in out
    assert '"loop budget exceeded (reason visited 5 times)"' in out.split("after step 11")[1]
    code, _, err = await tower(address, "fork", "no-such-run", "--step", "1")
    assert code == 2 and "run 'no-such-run' not found" in err


async def test_fork_at_a_gate_lets_a_different_decision_be_made(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
) -> None:
    address, run = address_of(env), new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        original = await client.start_workflow(
            RefundAgent.run, refund_request(client, run), id=run, task_queue=task_queue)
        info = await wait_pending(original)
        await decide(client, original, info["pending"])
        assert (await original.result()).status == "DONE"
        assert refunds(db_path) == [("INV-2004", 120000)]
        gate_step = next(r["step"] for r in info["records"] if r["status"] == "pending")

        forked, _ = await fork(address, client, run, gate_step, RefundState)
        again = await wait_pending(forked)  # the approval is not re-applied: it waits again
        await decide(client, forked, again["pending"], verdict=Verdict.REJECT)
        state = await forked.result()
    assert state.status == "DONE" and state.refund_id == ""
    assert "not approved" in state.reply
    assert refunds(db_path) == [("INV-2004", 120000)]  # only the original's refund
    # The original run's history still holds its approval and its refund.
    kept = client.get_workflow_handle(run, run_id=original.result_run_id)
    assert (await kept.describe()).status == WorkflowExecutionStatus.COMPLETED
    done = [e for e in (await kept.fetch_history()).events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED]
    assert len(done) == 1


async def test_a_fork_that_repeats_a_side_effect_finds_it_done(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
) -> None:
    # Forked before provisioning, the new run provisions again: the activities run again,
    # but the account and the welcome e-mail already made for those steps are not made twice.
    address, run = address_of(env), new_id("onboarding")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        original = await client.start_workflow(
            OnboardingAgent.run, OnboardingRequest(
                message="Hi, I'm Ada Byron from Analytical Engines, e-mail ada@engines.io"),
            id=run, task_queue=task_queue)
        first = await original.result()
        assert first.status == "DONE" and first.account_id
        forked, out = await fork(address, client, run, 3, OnboardingState)  # at provision
        assert "side effect the run already made for the same action" in out
        again = await asyncio.wait_for(forked.result(), 60)
    assert again.status == "DONE"
    assert (again.account_id, again.welcome_message_id) == (
        first.account_id, first.welcome_message_id)
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in await events_of(forked, SCHEDULED)]
    assert "create_account" in scheduled  # it ran again, and found its effect made
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM accounts WHERE email='ada@engines.io'"
                          ).fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] == 1


async def test_a_fork_before_a_gate_pays_the_approved_request_once_whatever_its_approval(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
) -> None:
    """The effect's key is the approved request (the run, the gate, the visit, the proposal's
    digest), not the decision nor its edits: after `tower fork` back to the gate's request,
    a token refused before the fork, a new approval, and approvals lowering the amount (on a
    fork, then on a second fork) all return the first refund: one refund row, its id in
    every run's state."""
    address, run = address_of(env), new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        original = await client.start_workflow(
            RefundAgent.run, refund_request(client, run), id=run, task_queue=task_queue)
        info = await wait_pending(original)
        late = decision(client, run, info["pending"])  # a second approver's token
        assert (await decide(client, original, info["pending"]))["result"] == "approved"
        try:  # refused: the request is decided already (or the run has ended meanwhile)
            refused = await submit_decision(original, late)
            assert refused.result != "approved", refused
        except (RPCError, WorkflowUpdateFailedError):
            pass
        first = await original.result()
        assert first.refund_id and refunds(db_path) == [("INV-2004", 120000)]
        gate_step = next(r["step"] for r in info["records"] if r["status"] == "pending")

        async def forked_with(**kw: Any) -> RefundState:
            forked, _ = await fork(address, client, run, gate_step, RefundState)
            again = await wait_pending(forked)
            assert again["pending"]["step"] == gate_step  # the same request, asked again
            if "token" in kw:
                outcome = (await submit_decision(forked, kw["token"])).model_dump(mode="json")
            else:
                outcome = await decide(client, forked, again["pending"], **kw)
            assert outcome["result"] == "approved", outcome
            return await forked.result()

        replayed = await forked_with(token=late)  # the token refused before the fork
        approved_again = await forked_with()  # a new approval of the same request
        lower = await forked_with(edits={"amount_cents": 100000})  # ...lowering the amount
        lower_again = await forked_with(edits={"amount_cents": 70000})  # a second fork
    for state in (replayed, approved_again, lower, lower_again):
        assert state.status == "DONE" and state.refund_id == first.refund_id
        assert "$1,200.00" in state.reply  # the refund made, told as it was made
    # The state says what was paid (the first refund), not what the later edits asked.
    assert (lower.amount_cents, lower_again.amount_cents) == (120000, 120000)
    assert refunds(db_path) == [("INV-2004", 120000)]  # paid once
