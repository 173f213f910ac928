"""fanout end to end: one child agent per item, merged by reducers; each failed-child
policy (fail, skip, retry) on the real dev server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from workerkit import final_state

from tower.activities.model import ModelSettings
from tower.core.engine import Transition
from tower.temporal._fanout import FanOutPolicy, OnChildFailure
from worker import build_worker
from workflows.fanout import FanOutAgent, FanOutRequest, FanOutState


async def _run(client: Client, task_queue: str, db_path: Path, companies: list[str],
               policy: FanOutPolicy) -> tuple[FanOutState, WorkflowHandle, list[Transition]]:
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(
            FanOutAgent.run, FanOutRequest(companies=companies, policy=policy),
            id=f"fanout-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await final_state(handle, FanOutState)
        return state, handle, await handle.query("transitions", result_type=list[Transition])


async def _children(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [e.start_child_workflow_execution_initiated_event_attributes.workflow_id
            for e in history.events if e.event_type
            == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED]


async def test_skip_policy_merges_the_good_children(
    client: Client, task_queue: str, db_path: Path
) -> None:
    policy = FanOutPolicy(on_failure=OnChildFailure.SKIP)
    state, handle, log = await _run(client, task_queue, db_path,
                                    ["Acme", "FailCo", "Globex"], policy)
    assert state.status == "DONE"
    assert set(state.profiles) == {"Acme", "Globex"} and "Acme is a company" in (
        state.profiles["Acme"])
    assert len(state.skipped) == 1 and state.skipped[0].startswith("FailCo: ")
    assert "invalid" in state.skipped[0]
    assert state.report.startswith("2 of 3 companies profiled; skipped: FailCo")
    assert sorted(c.rsplit("/", 1)[-1] for c in await _children(handle)) == ["0", "1", "2"]
    assert sorted(log[1].calls) == ["child:0", "child:1", "child:2"]
    # The failed child is a failed execution (AgentFailed), which the parent's policy saw
    # as a ChildWorkflowError carrying the child's reason.
    failco = next(c for c in await _children(handle) if c.endswith("/1"))
    child = client.get_workflow_handle(failco)
    assert (await child.describe()).status == WorkflowExecutionStatus.FAILED
    with pytest.raises(WorkflowFailureError) as failed:
        await child.result()
    assert state.skipped[0] == f"FailCo: {failed.value.cause}"


async def test_fail_policy_fails_the_parent_naming_the_child(
    client: Client, task_queue: str, db_path: Path
) -> None:
    state, _, _ = await _run(client, task_queue, db_path, ["Acme", "FailCo"], FanOutPolicy())
    assert state.status == "FAILED" and state.profiles == {}
    assert "1 of 2 children failed (policy fail); item 1 'FailCo'" in state.errors[-1]


async def test_retry_policy_starts_a_new_child_per_attempt(
    client: Client, task_queue: str, db_path: Path
) -> None:
    policy = FanOutPolicy(on_failure=OnChildFailure.RETRY, retries=2)
    state, handle, _ = await _run(client, task_queue, db_path, ["Acme", "FlakyCorp"], policy)
    assert state.status == "DONE"
    assert "attempt 1" in state.profiles["FlakyCorp"]
    assert sorted(c.split("/", 2)[-1] for c in await _children(handle)) == [
        "0", "1", "1/retry1"]
    # Spent retries fail the parent.
    state, handle, _ = await _run(client, task_queue, db_path, ["FailCo"], policy)
    assert state.status == "FAILED" and "after 3 attempt(s)" in state.errors[-1]
    assert len(await _children(handle)) == 3
