"""lifecycle end to end: the event-driven guard table on the real dev server.

Events come from the run's input, from the states' entry actions (model and tool
activities) and from outside as signals; all go through the same guards.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from conftest import WorkerFactory
from gatekit import signed_event, task_failures
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from workerkit import final_state

from tower.contract.failures import Code
from tower.core.engine import Transition
from tower.core.events import Rejection
from tower.temporal._runtime import EVENTS_PER_TASK, REJECTED_KEEP, UNTAKEN
from workflows.lifecycle import (
    MAX_RECOVERIES,
    LifecycleAgent,
    LifecycleRequest,
    LifecycleState,
)


async def _start(client: Client, task_queue: str, request: LifecycleRequest) -> WorkflowHandle:
    return await client.start_workflow(LifecycleAgent.run, request,
                                       id=f"lifecycle-{uuid.uuid4().hex[:8]}",
                                       task_queue=task_queue)


async def _log(handle: WorkflowHandle) -> list[Transition]:
    return await handle.query("transitions", result_type=list[Transition])


async def test_plans_calls_evaluates_until_solved(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await _start(client, task_queue, LifecycleRequest(
            goal="Check account ACC-1001 and invoice INV-2001"))
        state = await handle.result()
        log = await _log(handle)
        history = await handle.fetch_history()
    assert state.status == "DONE" and "ACC-1001" in state.answer
    assert [t.target for t in log] == ["IDLE", "PLANNING", "TOOL_CALL", "EVALUATING",
                                       "PLANNING", "TOOL_CALL", "EVALUATING", "DONE"]
    assert [t.step for t in log] == list(range(1, 9))
    assert "(input)" in log[1].reason and "guard start_is_true held" in log[1].reason
    # The model's plan is an activity of PLANNING's entry action, answered as an event.
    assert "(action:PLANNING)" in log[2].reason and log[2].calls == ["model:scripted"]
    assert [p.name for p in state.plans] == ["lookup_account", "lookup_invoice"]
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert scheduled == ["load_trust", "call_model", "lookup_account", "call_model",
                         "call_model", "lookup_invoice", "call_model"]


async def test_signals_are_validated_guarded_and_deduplicated(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await _start(client, task_queue, LifecycleRequest(
            goal="Check account ACC-1001", start=False))
        for _ in range(50):  # parked in IDLE: no event has arrived
            if await handle.query("status", result_type=str) == "RUNNING":
                break
            await asyncio.sleep(0.1)
        assert [t.target for t in await _log(handle)] == ["IDLE"]
        # Events move the machine, so they must be signed by a roster member allowed to
        # send lifecycle events: refused before the history (update) or when applied.
        start = {"step": 1, "start": True}
        for raw, why in ((start, "unsigned event refused"),
                         (signed_event(client, handle.id, start, sender="carol"),
                          "carol may not send lifecycle events"),
                         (signed_event(client, "another-run", start), "not this run"),
                         (signed_event(client, handle.id, {"step": 7, "start": True}),
                          "step 7")):
            with pytest.raises(WorkflowUpdateFailedError) as info:
                await handle.execute_update("send_event", raw, result_type=str)
            assert why in str(getattr(info.value.cause, "message", "")), why
        assert [t.target for t in await _log(handle)] == ["IDLE"]
        await handle.signal("event", start)  # unsigned, as a signal: refused when applied
        events: list[dict[str, Any]] = [
            {"raw": "go!"}, {"step": 1, "start": True, "priority": "high"},
            {"step": 1, "solved": True}, {"step": 7, "start": True},
            {"step": 1, "start": True}, {"step": 1, "start": True}]
        for event in events:
            await handle.signal("event", signed_event(client, handle.id, event))
        state = await handle.result()
        log = await _log(handle)
        rejected = await handle.query("rejected", result_type=list[Rejection])
    assert state.status == "DONE"
    assert sum(1 for t in log if t.source == "IDLE") == 1  # one start, not two
    reasons = [r.reason for r in rejected]
    assert len(reasons) == 6 and all(r.step == 1 and r.node == "IDLE" for r in rejected[:5])
    assert reasons[0].startswith("unsigned event refused")
    assert reasons[1].startswith("invalid event")
    assert "priority" in reasons[2] and "Extra inputs are not permitted" in reasons[2]
    assert "illegal transition IDLE -> ?" in reasons[3] and "start_is_true" in reasons[3]
    assert "step 7" in reasons[4]
    assert reasons[5].startswith("duplicate event")
    assert all(r.source == "signal" for r in rejected)


async def _parked_in_idle(handle: WorkflowHandle) -> dict[str, Any]:
    """The run's state once it waits in IDLE for its start event."""
    async with asyncio.timeout(30):
        while await handle.query("status", result_type=str) != "RUNNING":
            await asyncio.sleep(0.1)
    assert [t.target for t in await _log(handle)] == ["IDLE"]
    state: dict[str, Any] = await handle.query("state", result_type=dict)
    return state


async def _rejected(handle: WorkflowHandle, total: int) -> list[Rejection]:
    async with asyncio.timeout(60):
        while await handle.query("rejected_total", result_type=int) < total:
            await asyncio.sleep(0.1)
    assert await handle.query("rejected_total", result_type=int) == total
    return await handle.query("rejected", result_type=list[Rejection])


FORGED_EVENTS = 900  # with the test's 3 other signals, under the server's cap of 1,000


async def test_unreadable_signals_and_a_flood_of_forged_events_change_nothing(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    """Event signals the run cannot read (two inputs, an input that is not JSON) and signals
    of another name are refused into the audit trail: none is dropped unseen or fails the
    workflow task (the run would stall). Then 900 forged events while the worker is down,
    so all land in one task: 50 are taken and verified, the rest refused as they arrive, the
    newest 100 kept and all counted; no task fails, the run stays in IDLE, and a signed
    start event still moves it."""
    async with scripted_worker(max_cached_workflows=0):
        handle = await _start(client, task_queue, LifecycleRequest(
            goal="Check account ACC-1001", start=False))
        idle = await _parked_in_idle(handle)
        start = {"step": 1, "start": True}
        await handle.signal("event", args=[start, start])
        not_json = Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")
        await handle.signal("event", args=[RawValue(not_json)])
        await handle.signal("start", signed_event(client, handle.id, start))
        assert [r.reason for r in await _rejected(handle, 3)] == [
            "malformed event: an event signal carries one input, this one carried 2",
            "malformed event: the signal's input cannot be decoded",
            "unknown signal 'start': nothing changed"]
    forged = signed_event(client, handle.id, start, sender="carol")
    await asyncio.gather(*(handle.signal("event", forged) for _ in range(FORGED_EVENTS)))
    async with scripted_worker():
        rejected = await _rejected(handle, 3 + FORGED_EVENTS)
        assert len(rejected) == REJECTED_KEEP
        reasons = [r.reason for r in rejected]  # refused on arrival, then those verified
        assert reasons == ([UNTAKEN] * (REJECTED_KEEP - EVENTS_PER_TASK)
                           + ["carol may not send lifecycle events"] * EVENTS_PER_TASK)
        assert await handle.query("state", result_type=dict) == idle
        assert [t.target for t in await _log(handle)] == ["IDLE"]
        await handle.execute_update("send_event", signed_event(client, handle.id, start),
                                    result_type=str)
        state = await handle.result()
        assert task_failures(await handle.fetch_history()) == []
    assert state.status == "DONE"


async def test_recovery_is_bounded_then_failed(
    client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        handle = await _start(client, task_queue, LifecycleRequest(goal="Check ACC-9999"))
        # An event-driven run that ends FAILED fails its workflow execution too.
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        state = await final_state(handle, LifecycleState)
        log = await _log(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == Code.AGENT_FAILED
    assert cause.details[0] == {"agent": "lifecycle", "node": "RECOVERING", "step": state.step,
                                "reason": state.errors[-1]}
    assert state.status == "FAILED" and state.recoveries == MAX_RECOVERIES + 1
    assert [t.target for t in log] == (
        ["IDLE"] + ["PLANNING", "TOOL_CALL", "RECOVERING"] * (MAX_RECOVERIES + 1) + ["FAILED"])
    assert "recovery_exhausted held" in log[-1].reason
    assert state.errors == ["lookup_account: no account ACC-9999"] * (MAX_RECOVERIES + 1)
