"""A raw start whose arguments do not fit the agent (two input values) fails the run at
once, with the reason: not a first workflow task retried forever (TypeError in __init__)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from workerkit import activities

from tower.temporal import TowerPlugin
from workflows.registry import AGENTS


async def test_a_start_with_two_input_values_fails_with_the_reason(
        client: Client, task_queue: str, db_path: Path) -> None:
    # (Every agent's tools registered: a worker missing one refuses to start.)
    async with Worker(client, task_queue=task_queue, workflows=list(AGENTS.values()),
                      activities=activities(list(AGENTS.values()), db_path=db_path),
                      plugins=[TowerPlugin()]):
        handle = await client.start_workflow(
            "refund", args=[{"message": "Please refund $10 on invoice INV-2001"}, "extra"],
            id=f"bad-start-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(handle.result(), 30)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InputRefused", cause
    assert "2 argument(s) do not fit RefundAgent.run" in str(cause), cause
