"""Reconciling asks the tool's own activity (``ToolCall.reconcile``): only a ``tower.effects``
tool understands that. A side-effecting tool written without it, its call failed, is not
called a second time — the run fails the step saying why (tower/effects/_tool.py); a
tower.effects tool still reconciles (tests/test_effects.py)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from gatekit import refund_request
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from workerkit import activities

from activities.tools import TOOLS
from tower.activities.model import ModelSettings
from tower.activities.own import WorkerSettings
from tower.contract.wire import ToolCall
from tower.temporal import TowerPlugin
from workflows.refund import RefundAgent
from workflows.registry import AGENTS


async def test_a_plain_side_effecting_tool_is_not_called_again_to_reconcile(
    client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bool] = []  # each call's ``reconcile`` flag

    @activity.defn  # named by its function, as the plugin knows it: it serves the tool
    def issue_refund(call: ToolCall) -> dict[str, Any]:
        """Pays, then its provider times out: the run cannot tell whether it paid."""
        calls.append(call.reconcile)
        with sqlite3.connect(db_path) as db:
            db.execute("INSERT INTO refunds VALUES (?, ?, ?, 'plain', ?)",
                       (f"rf_{uuid.uuid4().hex[:8]}", call.arguments["invoice_id"],
                        call.arguments["amount_cents"], uuid.uuid4().hex))
        raise ApplicationError("the payment provider timed out", type="ProviderTimeout")

    monkeypatch.setattr(TOOLS["issue_refund"], "attempts", 1)
    own = [a for a in activities(list(AGENTS.values()), db_path=db_path)
           if a.__name__ != "issue_refund"]
    settings = WorkerSettings(models=ModelSettings(), streams=db_path.with_name("streams.sqlite"),
                              messages=db_path.with_name("messages.sqlite"))
    config = client.config()
    config["plugins"] = []  # this worker's plugin, with these settings (as build_worker does)
    run = f"plain-{uuid.uuid4().hex[:8]}"
    async with Worker(Client(**config), task_queue=task_queue,
                      workflows=list(AGENTS.values()), activities=[*own, issue_refund],
                      plugins=[TowerPlugin(settings=settings)]):
        handle = await client.start_workflow(
            RefundAgent.run, refund_request(client, run, message="Refund $30 on INV-2004"),
            id=run, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert calls == [False], f"the plain tool was called {len(calls)} times: {calls}"
    with sqlite3.connect(db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM refunds WHERE reason='plain'").fetchone() == (1,)
    said = str(failed.value.cause)
    assert "issue_refund failed and cannot be reconciled" in said, said
    assert "not a tower.effects tool" in said and "@tool(side_effect=True)" in said, said

