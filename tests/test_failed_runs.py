"""A FAILED refund run after its payment: the operator's `tower retry` (a Temporal reset)
lands each effect at most once, by the key rule of tower/core/keys.py — the same action (the
same approved request, whatever a new approval's edits) finds the refund already made."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from gatekit import (
    decide,
    new_id,
    recorded,
    refund_request,
    refunds,
    send_retry,
    wait_pending,
)
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of
from test_time_travel import fork
from workerkit import final_state

from tower.cli.common import CliError
from tower.contract.failures import Code
from tower.contract.wire import ModelRequest
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


async def test_forks_and_retries_pay_the_approved_request_once_whatever_its_edits(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
    scripted_worker: WorkerFactory, confirm_down: dict[str, bool],
) -> None:
    """The approved request is the action, whatever takes the run back: a fork to the
    request's step, a retry from the gate's node (it repeats the approval recorded last), a
    retry from ``reason`` that plans the same proposal again, a second fork — each
    re-approval lowers the amount, and each gets the first refund back. One refund row; its
    id in every run's state."""
    async with scripted_worker():
        handle = await start(client, task_queue, "Please refund $1,200 on invoice INV-2004")
        info = await wait_pending(handle)
        gate_step = info["pending"]["step"]
        await decide(client, handle, info["pending"], decision_id="d-first")
        await failed_at(handle)  # paid, then confirm failed
        paid = (await final_state(handle, RefundState)).refund_id
        assert paid and refunds(db_path) == [("INV-2004", 120_000)]

        for reset, cents in (("fork", 100_000), ("issue_refund", None), ("reason", 80_000),
                             ("fork", 70_000)):
            if reset == "fork":
                await fork(address_of(env), client, handle.id, gate_step, RefundState)
            else:
                await send_retry(client, handle.id, reset, "ops")
            latest = client.get_workflow_handle(handle.id, result_type=RefundState)
            if cents is not None:  # back before the gate: the same request, asked again
                again = (await wait_pending(latest))["pending"]
                assert again["step"] == gate_step and again["proposal"]["amount_cents"] == 120_000
                outcome = await decide(client, latest, again, edits={"amount_cents": cents})
                assert outcome["result"] == "approved", outcome
            await failed_at(latest)  # confirm is still down: FAILED again, so retryable
            state = await final_state(latest, RefundState)
            # The state says what was paid: the first refund, whatever the edit asked.
            assert (state.refund_id, state.amount_cents) == (paid, 120_000), reset
            assert refunds(db_path) == [("INV-2004", 120_000)], reset
        confirm_down["on"] = False
        await send_retry(client, handle.id, "confirm", "ops")
        done = await client.get_workflow_handle(handle.id, result_type=RefundState).result()
    assert done.status == "DONE" and done.refund_id == paid and "$1,200.00" in done.reply
    keys = [k for (k,) in effects(db_path)]
    assert len(keys) == 1 and "d-first" not in keys[0]


async def test_a_retry_from_reason_that_plans_another_proposal_is_a_new_request(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    confirm_down: dict[str, bool],
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, "Please refund $2,000 on invoice INV-2004")
        pending = (await wait_pending(handle))["pending"]
        await decide(client, handle, pending, edits={"amount_cents": 50_000})
        await failed_at(handle)  # $500 paid, then confirm failed
        assert refunds(db_path) == [("INV-2004", 50_000)]

        confirm_down["on"] = False
        await send_retry(client, handle.id, "reason", "ops")
        latest = client.get_workflow_handle(handle.id, result_type=RefundState)
        # Re-planned on the invoice as it is now ($2,400, $1,900 refundable): another
        # proposal, so another request (the payment tool still refuses more than is left).
        again = (await wait_pending(latest))["pending"]
        assert again["proposal"]["amount_cents"] == 190_000
        await decide(client, latest, again)
        done = await latest.result()
    assert done.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 50_000), ("INV-2004", 190_000)]
    assert len({k for (k,) in effects(db_path)}) == 2


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
