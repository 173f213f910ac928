"""On a worker, a scripted model's script that raises is the bug it is: the call fails at
once (one attempt, no retries), naming the node and the script, and the run takes its
error path — not ~31 s of retries as if the model were down."""

from __future__ import annotations

import time
import uuid

from conftest import WorkerFactory
from script_agents import BrokenScript
from temporalio.api.enums.v1 import EventType, RetryState
from temporalio.client import Client
from workerkit import final_state

from tower.core.state import Status
from workflows.account import AccountRequest, AccountState


async def test_a_raising_script_fails_its_call_at_once(
    client: Client, task_queue: str, scripted_worker: WorkerFactory,
) -> None:
    async with scripted_worker(workflows=[BrokenScript]):
        began = time.monotonic()
        handle = await client.start_workflow(
            BrokenScript.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"broken-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await final_state(handle, AccountState)
        took = time.monotonic() - began
    assert state.status == Status.FAILED
    error = state.errors[-1]
    assert "broken_script/reason (broken_script)" in error and "KeyError" in error, error
    history = await handle.fetch_history()
    failed = [e for e in history.events
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED]
    # One attempt, never retried.
    assert len(failed) == 1 and (failed[0].activity_task_failed_event_attributes.retry_state
                                 == RetryState.RETRY_STATE_NON_RETRYABLE_FAILURE), failed
    assert took < 10, f"the run took {took:.1f} s to fail"
