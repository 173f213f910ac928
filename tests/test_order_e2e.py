"""The order agent end to end on the real dev server; a FAILED run is a failed workflow
execution (result(), list queries), and an operator takes it on with `tower retry` (a reset)."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import WorkerFactory
from gatekit import recorded, send_retry
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, tower
from workerkit import final_state

from tower.activities.model import ModelSettings
from tower.cli.common import CliError
from tower.client._runs import run_state
from tower.contract import search
from tower.contract.failures import Code
from tower.core.engine import Transition
from workflows.order import OrderAgent, OrderRequest, OrderState

SCRIPTED = ModelSettings()
TEXT = "Please send 2 x WIDGET-1 and 1 x GADGET-2 to 1 Main St, Springfield, US"


def rows(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute(sql).fetchall()


async def start(client: Client, task_queue: str, request: OrderRequest
                ) -> WorkflowHandle[OrderAgent, OrderState]:
    return await client.start_workflow(
        OrderAgent.run, request, id=f"order-{uuid.uuid4().hex[:8]}", task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL)


async def failed(handle: WorkflowHandle) -> dict[str, object]:
    """The AgentFailed details of a run that must end FAILED."""
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == Code.AGENT_FAILED and cause.non_retryable, cause
    details: dict[str, object] = cause.details[0]
    assert cause.message == details["reason"]
    return details


async def listed(client: Client, query: str) -> list[str]:
    """Workflow ids the list query finds, once visibility has caught up (it lags)."""
    for _ in range(100):
        found = [wf.id async for wf in client.list_workflows(query)]
        if found:
            return found
        await asyncio.sleep(0.1)
    return []


async def test_order_ships_with_exact_figures_and_each_effect_once(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text=TEXT))
        state = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
    assert state.status == "DONE" and state.outcome == "shipped"
    # 2 x 19.99 + 249.00 = 288.98; US tax 7.25 % = 20.95105 -> 20.95 (half up)
    assert (state.subtotal, state.tax, state.total) == (
        Decimal("288.98"), Decimal("20.95"), Decimal("309.93"))
    assert "309.93" in state.email and state.shipment_id in state.email
    assert [t.target for t in log] == ["parse", "check_stock", "compute_tax", "charge", "ship",
                                       "confirm", "DONE"]
    assert log[1].calls == ["model:scripted"] and log[4].calls == ["tool:charge_payment"]
    assert rows(db_path, "SELECT amount, status FROM charges") == [("309.93", "paid")]
    assert len(rows(db_path, "SELECT * FROM shipments")) == 1
    assert rows(db_path, "SELECT stock FROM products WHERE sku='WIDGET-1'") == [(4998,)]


async def test_declined_payment_releases_stock_and_fails_the_workflow_with_the_reason(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text=TEXT, card="tok_low"))
        details = await failed(handle)
        state = await final_state(handle, OrderState)
        found = await listed(client, f"WorkflowId = '{handle.id}' AND "
                                     "ExecutionStatus = 'Failed' AND "
                                     f"{search.AGENT_STATUS.name} = 'FAILED'")
        described = await handle.describe()
    # With no worker left, `tower state` reads the failed run from its replayed history.
    assert await run_state(client, handle.id, workflows=lambda: [OrderAgent]) == (
        state.model_dump(mode="json"))
    assert details == {"agent": "order", "node": "charge", "step": state.step,
                       "reason": "payment declined: insufficient funds"}
    assert found == [handle.id]
    assert described.typed_search_attributes.get(search.AGENT_ERROR) == details["reason"]
    assert state.status == "FAILED" and state.outcome == "payment_declined"
    assert state.errors == ["payment declined: insufficient funds"]
    assert rows(db_path, "SELECT status FROM charges") == [("declined",)]
    assert rows(db_path, "SELECT status FROM reservations") == [("released",)]
    assert rows(db_path, "SELECT stock FROM products WHERE sku='WIDGET-1'") == [(5000,)]
    assert rows(db_path, "SELECT COUNT(*) FROM shipments") == [(0,)]


async def test_out_of_stock_fails_then_an_operator_restocks_and_retries_by_reset(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    request = OrderRequest(text="4 x GIZMO-3 to 9 High St, Leeds, GB")
    async with scripted_worker():
        handle = await start(client, task_queue, request)
        details = await failed(handle)
        assert (details["node"], details["reason"]) == (
            "check_stock", "out of stock: GIZMO-3 (asked 4, 0 left)")
        first = (await handle.describe()).run_id

        # Bad decisions are refused and change nothing (no new run, same history).
        events = await recorded(handle)
        with pytest.raises(CliError, match="'nope' is not a node of this agent"):
            await send_retry(client, handle.id, "nope", "ops")
        with pytest.raises(CliError, match="never entered 'ship' in its last run .*"
                                           "START → parse → check_stock → FAILED"):
            await send_retry(client, handle.id, "ship", "ops")
        assert (await handle.describe()).run_id == first
        assert await recorded(handle) == events

        with sqlite3.connect(db_path) as db:
            db.execute("UPDATE products SET stock = 10 WHERE sku='GIZMO-3'")
        # Two operators (or a double click) race: a second reset terminates the first's
        # new run, or is refused as still running; either way the stock is reserved once.
        answers = await asyncio.gather(*(send_retry(client, handle.id, "check_stock", "ops")
                                         for _ in range(2)), return_exceptions=True)
        latest = client.get_workflow_handle(handle.id, result_type=OrderState)
        final = await latest.result()
        log = await latest.query("transitions", result_type=list[Transition])
        new = await latest.describe()
    resets = [a for a in answers if isinstance(a, str)]
    assert resets and f"new run {new.run_id}" in " ".join(resets), answers
    assert all("still running" in str(a) for a in answers if not isinstance(a, str)), answers
    assert new.run_id != first and final.status == "DONE" and final.total == Decimal("25.20")
    assert [t.target for t in log] == ["parse", "check_stock", "compute_tax", "charge", "ship",
                                       "confirm", "DONE"]
    assert all(t.source != "FAILED" for t in log)  # a reset, not a move out of FAILED
    assert rows(db_path, "SELECT stock FROM products WHERE sku='GIZMO-3'") == [(6,)]
    history = await client.get_workflow_handle(handle.id, run_id=new.run_id).fetch_history()
    reset = [e.workflow_task_failed_event_attributes for e in history.events
             if e.HasField("workflow_task_failed_event_attributes")]
    assert "tower retry --from check_stock by ops" in reset[0].failure.message


async def test_retry_refuses_runs_that_did_not_fail(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        running = await start(client, task_queue, OrderRequest(text=TEXT))
        await running.result()
        with pytest.raises(CliError, match="ended DONE .COMPLETED to Temporal., not FAILED: "
                                           "nothing to retry .*tower fork"):
            await send_retry(client, running.id, "parse", "ops")
        with pytest.raises(CliError, match="not found"):
            await send_retry(client, "no-such-run", "parse", "ops")


async def test_tower_retry_command_follows_the_new_run(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
    scripted_worker: WorkerFactory
) -> None:
    address = address_of(env)
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text="2 x GIZMO-3 to 3 Ash Row, US"))
        await failed(handle)
        code, out, err = await tower(address, "state", handle.id)
        assert code == 0 and '"status": "FAILED"' in out, err
        code, _, err = await tower(address, "retry", handle.id, "--from", "nope")
        assert code == 2 and "'nope' is not a node of this agent (nodes: parse, check_stock" in err
        code, _, err = await tower(address, "retry", "no-such-run", "--from", "parse")
        assert code == 2 and "run 'no-such-run' not found" in err
        code, out, _ = await tower(address, "list", "--status", "FAILED", "--json")
        assert handle.id in out
        with sqlite3.connect(db_path) as db:
            db.execute("UPDATE products SET stock = 5 WHERE sku='GIZMO-3'")
        code, out, err = await tower(address, "retry", handle.id, "--from", "check_stock",
                                     "--by", "ops")
        assert code == 0, err
        assert f"{handle.id} reset to step 1 (before it entered check_stock): new run" in out
        assert "parse → check_stock" in out and "status: DONE" in out
        assert "START → parse" not in out  # replayed steps are not printed again
        assert (await client.get_workflow_handle(handle.id).result())["status"] == "DONE"
