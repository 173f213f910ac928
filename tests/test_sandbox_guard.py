"""Tower's sandbox (tower.temporal._sandbox: the SDK's, the engine passed
through) still catches agent code that breaks determinism: the run's workflow task fails
with the SDK's restriction error, and the run does not complete."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from sandbox_probe import ReadsTheClock
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from tower.activities.model import ModelSettings
from tower.temporal import TowerPlugin
from worker import build_worker


async def test_a_workflow_reading_the_wall_clock_is_stopped(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), workflows=[ReadsTheClock]):
        handle = await client.start_workflow(ReadsTheClock.run, id=f"probe-{uuid.uuid4().hex[:6]}",
                                             task_queue=task_queue)
        failures: list[str] = []
        for _ in range(200):
            history = await handle.fetch_history()
            failures = [e.workflow_task_failed_event_attributes.failure.message
                        for e in history.events
                        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
            if failures:
                break
            await asyncio.sleep(0.1)
        await handle.terminate("probe done")
    assert failures and "datetime.datetime.now" in failures[0], failures
    assert not any(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
                   for e in history.events)


def test_runs_get_the_sdk_s_sandbox() -> None:
    # The worker's runner is the SDK's sandbox, with its default restrictions for
    # everything not passed through (the class the guard above runs in).
    runner = TowerPlugin().runner_for(None)
    assert isinstance(runner, SandboxedWorkflowRunner)
    default = SandboxRestrictions.default
    assert runner.restrictions.invalid_module_members == default.invalid_module_members
    assert {"tower", "joserfc"} <= runner.restrictions.passthrough_modules
