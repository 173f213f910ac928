"""Through a worker on the dev server: a manager's raise of the amount at the gate is
refused by a rule written on the planned amount (the trap of issue 31 paid it), nothing is
paid, the run's state and history are unchanged; a lower amount is then paid once. An
amount of the wrong JSON type (``true``, ``100.0``, ``"100"``) is refused ``bad_edit`` in
the approver's terms, by update and by signal, and the run still waits for a decision."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import WorkerFactory
from gatekit import (
    decide,
    decision,
    new_id,
    recorded,
    refund_request,
    refunds,
    snapshot,
    wait_pending,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from trap_agents import TrapRefund

from tower.activities.model import ModelSettings
from tower.contract.failures import Code
from worker import build_worker
from workflows.refund import RefundAgent, RefundRequest

SIGNALED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED


async def test_a_raise_at_the_gate_is_refused_and_nothing_is_paid(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
) -> None:
    async with scripted_worker(workflows=[TrapRefund]):
        run = new_id("refund-trap")
        handle = await client.start_workflow(
            TrapRefund.run, RefundRequest(message="Please refund $820 on invoice INV-2004",
                                          limit_cents=50_000), id=run, task_queue=task_queue)
        pending = (await wait_pending(handle))["pending"]
        assert pending["proposal"]["amount_cents"] == 82_000
        before, history = await snapshot(handle), await recorded(handle)
        raise_to = decision(client, run, pending, edits={"amount_cents": 90_000})
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("decide", raise_to, result_type=dict)
        assert "the amount may only go down" in str(refused.value.cause)
        assert await recorded(handle) == history  # refused before the history
        await handle.signal("decision", raise_to)  # the signal is refused alike
        audit = await handle.query("approvals", result_type=dict)
        assert [r["reason"] for r in audit["refused"]] == ["the amount may only go down"]
        assert await snapshot(handle) == before and refunds(db_path) == []
        out = await decide(client, handle, pending, edits={"amount_cents": 80_000})
        state = await handle.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 80_000)]


# Issue 37: `true` was paid as 1 cent, `100.0` as 100, and `"100"` refused in Python's words.
MISTYPED = [(True, "true"), (100.0, "100.0"), ("100", '"100"')]


async def test_a_mistyped_amount_is_refused_as_bad_edit_and_the_run_still_waits(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        run = new_id("refund")
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        pending = (await wait_pending(handle))["pending"]
        before, history = await snapshot(handle), await recorded(handle)
        for value, shown in MISTYPED:
            why = f"amount_cents must be a whole number of cents; got {shown}"
            wrong = decision(client, run, pending, edits={"amount_cents": value})
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update("decide", wrong, result_type=dict)
            cause = refused.value.cause
            assert isinstance(cause, ApplicationError)
            assert (cause.message, cause.details) == (why, (Code.BAD_EDIT.value,))
            await handle.signal("decision", wrong)  # the signal is refused alike
        assert await recorded(handle) == [*history, *[SIGNALED] * len(MISTYPED)]
        audit = await handle.query("approvals", result_type=dict)
        assert [(r["code"], r["reason"]) for r in audit["refused"]] == [
            ("bad_edit", f"amount_cents must be a whole number of cents; got {shown}")
            for _, shown in MISTYPED]
        assert await handle.query("status", result_type=str) == "AWAITING_APPROVAL"
        assert await snapshot(handle) == before and refunds(db_path) == []
        out = await decide(client, handle, pending, edits={"amount_cents": 100})
        state = await handle.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 100)]
