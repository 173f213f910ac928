"""A FAILED refund run after its payment: the operator's `tower retry` (a Temporal reset)
lands each effect at most once, by the key rule of tower/core/keys.py — the same approved
action finds the refund already made; a new decision is a new action."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from gatekit import decide, new_id, recorded, refund_request, refunds, wait_pending
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError

from tower.cli.cmd_operator import send_retry
from tower.cli.common import CliError
from tower.contract.failures import Code
from tower.contract.wire import ModelRequest
from tower.temporal._outcome import final_state
from workflows.refund import RefundAgent, RefundState


@pytest.fixture
def confirm_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """The model refuses `confirm` (non-retryable) while ``down["on"]``: the run fails
    after it paid. Set it False and the same worker answers again."""
    down = {"on": True}
    script = RefundAgent.scripts["confirm"]  # type: ignore[attr-defined]

    def confirm(request: ModelRequest) -> str:
        if down["on"]:
            raise ApplicationError("the model rejected the request", type="ModelRequestRejected",
                                   non_retryable=True)
        return str(script(request))
    monkeypatch.setitem(RefundAgent.scripts, "confirm", confirm)  # type: ignore[attr-defined]
    yield down


async def start(client: Client, task_queue: str, message: str) -> WorkflowHandle[Any, Any]:
    run = new_id("refund")
    return await client.start_workflow(RefundAgent.run, refund_request(client, run,
                                                                       message=message),
                                       id=run, task_queue=task_queue)


async def failed_at(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == Code.AGENT_FAILED, cause
    details: dict[str, Any] = cause.details[0]
    return details


def effects(db_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute("SELECT idempotency_key FROM tower_effects "
                          "WHERE tool='issue_refund' AND result IS NOT NULL").fetchall()


async def test_a_retry_from_the_payment_finds_the_refund_already_made(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    confirm_down: dict[str, bool],
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, "Refund $300 on invoice INV-2004")
        details = await failed_at(handle)
        paid = (await final_state(handle, RefundState)).refund_id
        assert details["node"] == "confirm" and paid
        assert refunds(db_path) == [("INV-2004", 30000)]

        confirm_down["on"] = False
        await send_retry(client, handle.id, "issue_refund", "ops")
        latest = client.get_workflow_handle(handle.id, result_type=RefundState)
        done = await latest.result()
        history = await latest.fetch_history()
    # The repeat of the same action (same run chain, node, no decision, arguments) found
    # the refund by its key: one refund, one effect, the same refund id.
    assert done.status == "DONE" and done.refund_id == paid
    assert refunds(db_path) == [("INV-2004", 30000)] and len(effects(db_path)) == 1
    reset = next(e.event_id for e in history.events
                 if e.HasField("workflow_task_failed_event_attributes"))
    again = [e.activity_task_scheduled_event_attributes.activity_type.name
             for e in history.events if e.event_id > reset
             and e.HasField("activity_task_scheduled_event_attributes")]
    assert again == ["issue_refund", "call_model"]  # the payment ran again, and acted once


async def test_a_retry_from_reason_replans_a_new_action(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    confirm_down: dict[str, bool],
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, "Please refund $1,200 on invoice INV-2004")
        pending = (await wait_pending(handle))["pending"]
        # The manager lowers it to $500 and approves: paid, then confirm fails.
        await decide(client, handle, pending, edits={"amount_cents": 50_000},
                     decision_id="d-first")
        await failed_at(handle)
        assert refunds(db_path) == [("INV-2004", 50_000)]

        confirm_down["on"] = False
        await send_retry(client, handle.id, "reason", "ops")
        latest = client.get_workflow_handle(handle.id, result_type=RefundState)
        # The old decision is not re-applied: the new run plans afresh (the invoice,
        # $2,400, has $1,900 refundable now) and asks again.
        again = (await wait_pending(latest))["pending"]
        assert again["proposal"]["amount_cents"] == 120_000
        await decide(client, latest, again, decision_id="d-second")
        done = await latest.result()
    # The re-planned request is a new action (another amount: another key), still never more
    # than the invoice (the payment tool's own check). The key names the action, never the
    # decision: a fork's re-approval of an unchanged proposal is the same action.
    assert done.status == "DONE"
    assert sorted(refunds(db_path)) == [("INV-2004", 50_000), ("INV-2004", 120_000)]
    keys = [k for (k,) in effects(db_path)]
    assert len(set(keys)) == 2 and not any("d-first" in k or "d-second" in k for k in keys)


async def test_retry_refuses_a_run_still_running(
    client: Client, task_queue: str, scripted_worker: WorkerFactory,
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, "Please refund $1,200 on invoice INV-2004")
        await wait_pending(handle)
        events = await recorded(handle)
        with pytest.raises(CliError, match="still running .AWAITING_APPROVAL.: retry is for a "
                                           "run that ended FAILED"):
            await send_retry(client, handle.id, "reason", "ops")
        assert await recorded(handle) == events
        await handle.terminate("test over")
