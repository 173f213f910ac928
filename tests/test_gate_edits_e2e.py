"""Through a worker on the dev server: a manager's raise of the amount at the gate is
refused by a rule written on the planned amount (the trap of issue 31 paid it), nothing is
paid, the run's state and history are unchanged; a lower amount is then paid once."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import WorkerFactory
from gatekit import decide, decision, new_id, recorded, refunds, snapshot, wait_pending
from temporalio.client import Client, WorkflowUpdateFailedError
from trap_agents import TrapRefund

from workflows.refund import RefundRequest


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
