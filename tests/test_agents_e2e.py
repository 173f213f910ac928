"""account and support end to end on the real dev server with the scripted model."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from conftest import WorkerFactory
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from workerkit import final_state

from tower.activities.model import ModelSettings
from tower.core.engine import Transition
from workflows.account import AccountAgent, AccountRequest, AccountState
from workflows.support import SupportAgent, SupportRequest

SCRIPTED = ModelSettings()


async def test_account_reads_the_account_then_answers(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
    assert state.status == "DONE"
    assert "ACC-1001" in state.answer and "active" in state.answer
    assert [(t.source, t.target) for t in log] == [
        ("START", "reason"), ("reason", "lookup_account"), ("lookup_account", "reason"),
        ("reason", "DONE")]
    assert [t.step for t in log] == [1, 2, 3, 4]
    assert log[1].calls == ["model:scripted"] and log[2].calls == ["tool:lookup_account"]
    # One activity per model or tool call, nothing else.
    history = await handle.fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled == ["call_model", "lookup_account", "call_model"]


async def test_account_loop_budget_ends_failed(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await client.start_workflow(
            AccountAgent.run, AccountRequest(question="Check account ACC-9999"),
            id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await final_state(handle, AccountState)
    assert state.status == "FAILED"
    assert any("loop budget exceeded" in e for e in state.errors)
    assert state.visits["reason"] == 5 and state.node == "FAILED"


async def test_support_routes_billing_with_billing_tools_only(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        state = await client.execute_workflow(
            SupportAgent.run, SupportRequest(message="Why was invoice INV-2001 charged?"),
            id=f"support-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    assert state.status == "DONE" and state.category == "BILLING"
    assert state.tools_used == ["lookup_invoice"]
    assert "INV-2001" in state.reply
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM refunds").fetchone()[0] == 0
