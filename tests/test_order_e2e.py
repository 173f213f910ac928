"""The order agent end to end on the real dev server, and an operator's decisions on
its FAILED runs (retry from a named node, abort, the dead-letter wait)."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import WorkerFactory
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, tower

from activities.model import ModelSettings
from starter.cmd_operator import send_abort, send_retry
from starter.common import CliError
from tower import Kind, Transition
from tower.contract import search
from tower.temporal.runtime import FAILED_WAIT_MEMO
from workflows.order import OrderAgent, OrderRequest, OrderState

SCRIPTED = ModelSettings()
TEXT = "Please send 2 x WIDGET-1 and 1 x GADGET-2 to 1 Main St, Springfield, US"


def rows(db_path: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute(sql).fetchall()


async def start(client: Client, task_queue: str, request: OrderRequest,
                wait: float = 0) -> WorkflowHandle[OrderAgent, OrderState]:
    return await client.start_workflow(
        OrderAgent.run, request, id=f"order-{uuid.uuid4().hex[:8]}", task_queue=task_queue,
        memo={FAILED_WAIT_MEMO: wait}, id_conflict_policy=WorkflowIDConflictPolicy.FAIL)


async def until_status(handle: WorkflowHandle, status: str) -> None:
    for _ in range(200):
        if await handle.query("status", result_type=str) == status:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never reached {status}")


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


async def test_declined_payment_releases_stock_and_fails_with_the_reason(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text=TEXT, card="tok_low"))
        state = await handle.result()
    assert state.status == "FAILED" and state.outcome == "payment_declined"
    assert state.errors == ["payment declined: insufficient funds"]
    assert rows(db_path, "SELECT status FROM charges") == [("declined",)]
    assert rows(db_path, "SELECT status FROM reservations") == [("released",)]
    assert rows(db_path, "SELECT stock FROM products WHERE sku='WIDGET-1'") == [(5000,)]
    assert rows(db_path, "SELECT COUNT(*) FROM shipments") == [(0,)]


async def test_out_of_stock_waits_for_an_operator_who_restocks_and_retries(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    request = OrderRequest(text="4 x GIZMO-3 to 9 High St, Leeds, GB")
    async with scripted_worker():
        handle = await start(client, task_queue, request, wait=600)
        await until_status(handle, "FAILED")
        state = await handle.query("state", result_type=dict)
        assert state["errors"] == ["out of stock: GIZMO-3 (asked 4, 0 left)"]
        # FAILED is searchable, with its reason, while the run waits.
        query = (f"WorkflowId = '{handle.id}' AND {search.AGENT_STATUS.name} = 'FAILED'")
        found = [wf async for wf in client.list_workflows(query)]
        for _ in range(50):
            if found:
                break
            await asyncio.sleep(0.2)
            found = [wf async for wf in client.list_workflows(query)]
        assert found[0].typed_search_attributes.get(search.AGENT_ERROR) == state["errors"][0]

        # A bad decision is refused and changes nothing.
        events = len((await handle.fetch_history()).events)
        with pytest.raises(CliError, match="'nope' is not a node of order"):
            await send_retry(client, handle.id, "nope", "ops")
        assert len((await handle.fetch_history()).events) == events
        assert await handle.query("state", result_type=dict) == state

        with sqlite3.connect(db_path) as db:
            db.execute("UPDATE products SET stock = 10 WHERE sku='GIZMO-3'")
        await send_retry(client, handle.id, "check_stock", "ops")
        final = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
    assert final.status == "DONE" and final.total == Decimal("25.20")  # 21.00 + 20 % VAT
    retry = next(t for t in log if t.source == "FAILED")
    assert (retry.target, retry.kind, retry.reason) == (
        "check_stock", Kind.OPERATOR, "retry by ops")
    assert rows(db_path, "SELECT stock FROM products WHERE sku='GIZMO-3'") == [(6,)]


async def test_abort_closes_a_failed_run_and_a_done_run_refuses_decisions(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text="1 x GIZMO-3 to 2 Elm Rd, US"),
                             wait=600)
        await until_status(handle, "FAILED")
        await send_abort(client, handle.id, "ops", "customer cancelled")
        state = await handle.result()
        assert state.status == "FAILED"
        assert state.errors[-1] == "aborted by ops: customer cancelled"
        with pytest.raises(CliError, match="not found or already closed"):
            await send_retry(client, handle.id, "parse", "ops")

        running = await start(client, task_queue, OrderRequest(text=TEXT), wait=600)
        await running.result()
        with pytest.raises(CliError, match="not found or already closed"):
            await send_abort(client, running.id, "ops")


async def test_a_failed_run_closes_by_itself_when_no_operator_decides(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text="1 x GIZMO-3 to 2 Elm Rd, US"),
                             wait=1.5)
        await until_status(handle, "FAILED")
        state = await asyncio.wait_for(handle.result(), timeout=30)
    assert state.status == "FAILED" and state.outcome == "out_of_stock"


async def test_tower_retry_and_abort_commands(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path,
    scripted_worker: WorkerFactory
) -> None:
    address = address_of(env)
    async with scripted_worker():
        handle = await start(client, task_queue, OrderRequest(text="2 x GIZMO-3 to 3 Ash Row, US"),
                             wait=600)
        await until_status(handle, "FAILED")
        code, _, err = await tower(address, "retry", handle.id, "--from", "nope")
        assert code == 2 and err.startswith(f"error: retry refused for '{handle.id}'")
        assert "'nope' is not a node of order (nodes: parse, check_stock" in err
        code, _, err = await tower(address, "abort", "no-such-run")
        assert code == 2 and "run 'no-such-run' not found or already closed" in err
        with sqlite3.connect(db_path) as db:
            db.execute("UPDATE products SET stock = 5 WHERE sku='GIZMO-3'")
        code, out, err = await tower(address, "retry", handle.id, "--from", "check_stock",
                                     "--by", "ops")
        assert code == 0, err
        assert f"{handle.id} will retry from check_stock" in out
        assert "FAILED → check_stock" in out and "status: DONE" in out
        assert (await handle.result()).status == "DONE"
