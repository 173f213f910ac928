"""Signals whose payloads the worker cannot open: encrypted under a key it does not hold,
tampered, or a reference to a stored payload that is not there. Anyone who can signal a run can
send them; each must be refused into the run's audit trail like any other bad signal — not
fail every workflow task of the run from then on (a run stalled for good)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from gatekit import (
    decision,
    new_id,
    refund_request,
    refunds,
    snapshot,
    task_failures,
    wait_pending,
)
from temporalio.api.common.v1 import (
    Header,
    Memo,
    Payload,
    Payloads,
    WorkflowExecution,
    WorkflowType,
)
from temporalio.api.enums.v1 import EventType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.update.v1 import Input, Meta, Request, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    SignalWorkflowExecutionRequest,
    StartWorkflowExecutionRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowFailureError
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext

from tower.activities.model import ModelSettings
from tower.temporal.codec import ENCODING, KEY_ID, CodecError, new_key
from tower.temporal.payloads import UnopenablePayload, guarded, tower_data_converter
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.integration
FROM_OUTSIDE = {EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED,
                EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED}
COMPLETED = UpdateWorkflowExecutionLifecycleStage.Value(
    "UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED")


def reference(driver: str, claim: dict[str, str]) -> Payload:
    """An external-storage reference in the SDK's format, naming ``claim``."""
    body = {"driver_name": driver, "driver_claim": {"claim_data": claim}}
    return Payload(metadata={"encoding": b"json/external-storage-reference"},
                   data=json.dumps(body).encode())


async def tower_client(client: Client, store: Path, env: dict[str, str]) -> Client:
    """A client (and so its worker) with Tower's converter: codec, payload store."""
    return await Client.connect(client.service_client.config.target_host,
                                namespace=client.namespace,
                                data_converter=tower_data_converter(store_dir=store, env=env))


async def signal_raw(tower: Client, run: str, payload: Payload, header: Header | None = None,
                     ) -> None:
    """A `decision` signal with exactly these bytes (no client codec on the way)."""
    await tower.workflow_service.signal_workflow_execution(SignalWorkflowExecutionRequest(
        namespace=tower.namespace, workflow_execution=WorkflowExecution(workflow_id=run),
        signal_name="decision", input=Payloads(payloads=[payload]), header=header,
        identity="mallory"))


async def received(handle: Any) -> list[int]:
    """What reached the run from outside, as its history records it: updates and signals
    (not its own activities, which may still finish meanwhile: the gate's notification)."""
    return [e.event_type for e in (await handle.fetch_history()).events
            if e.event_type in FROM_OUTSIDE]


UNOPENABLE = {
    "encrypted under a key the worker holds, tampered":
        Payload(metadata={"encoding": ENCODING, KEY_ID: b"k1"}, data=os.urandom(64)),
    "encrypted under a key nobody holds":
        Payload(metadata={"encoding": ENCODING, KEY_ID: b"nope"}, data=os.urandom(64)),
    "a stored payload that is not there": reference("tower-local", {"sha256": "ab" * 32}),
    "a stored payload outside the store": reference("tower-local", {"sha256": "../../etc/hosts"}),
    "a store the worker does not have": reference("s3", {"key": "x"}),
}


@pytest.mark.parametrize("encrypted", [True, False], ids=["codec", "no-keys"])
async def test_a_signal_the_worker_cannot_open_is_refused_and_the_run_goes_on(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, encrypted: bool,
) -> None:
    env = {"TOWER_CODEC_KEYS": f"k1={new_key()}"} if encrypted else {}
    tower = await tower_client(client, tmp_path / "payloads", env)
    async with build_worker(tower, task_queue=task_queue, db_path=db_path, models=ModelSettings()):
        run = new_id("refund")
        handle = await tower.start_workflow(RefundAgent.run, refund_request(tower, run), id=run,
                                            task_queue=task_queue)
        pending = (await wait_pending(handle))["pending"]
        before = await snapshot(handle)
        for payload in UNOPENABLE.values():
            await signal_raw(tower, run, payload)
        sealed = UNOPENABLE["encrypted under a key nobody holds"]
        await signal_raw(tower, run, Payload(metadata={"encoding": b"json/plain"}, data=b"{}"),
                         header=Header(fields={"_tracer-data": sealed}))
        async with asyncio.timeout(30):
            while (audit := await handle.query("approvals", result_type=dict))[
                    "refused_total"] < len(UNOPENABLE) + 1:
                await asyncio.sleep(0.2)
        assert task_failures(await handle.fetch_history()) == []
        assert await snapshot(handle) == before and refunds(db_path) == []
        out = await handle.execute_update("decide", decision(tower, run, pending), result_type=dict)
        state: Any = await handle.result()
    assert out["result"] == "approved" and state.status == "DONE"
    assert refunds(db_path) == [("INV-2004", 120000)]
    reasons = [r["reason"] for r in audit["refused"]]
    assert all("could not be opened" in r for r in reasons[:-1]), reasons
    assert reasons[-1] == "malformed decision: no token"  # its header was never opened


async def test_an_update_or_a_start_the_worker_cannot_open_is_refused_at_once(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    """The same payloads as a decision by update: rejected, nothing recorded; as a raw
    start's input, or in its memo (which the run reads): the run fails at once, with the
    reason, never a workflow task retrying forever."""
    env = {"TOWER_CODEC_KEYS": f"k1={new_key()}"}
    tower = await tower_client(client, tmp_path, env)
    forged = UNOPENABLE["encrypted under a key nobody holds"]
    async with build_worker(tower, task_queue=task_queue, db_path=db_path, models=ModelSettings()):
        run = new_id("refund")
        handle = await tower.start_workflow(RefundAgent.run, refund_request(tower, run), id=run,
                                            task_queue=task_queue)
        await wait_pending(handle)
        before = await snapshot(handle), await received(handle)
        for payload in UNOPENABLE.values():
            request = Request(meta=Meta(update_id=new_id("u"), identity="mallory"),
                              input=Input(name="decide", args=Payloads(payloads=[payload])))
            answer = await tower.workflow_service.update_workflow_execution(
                UpdateWorkflowExecutionRequest(
                    namespace=tower.namespace, request=request,
                    workflow_execution=WorkflowExecution(workflow_id=run),
                    wait_policy=WaitPolicy(lifecycle_stage=COMPLETED)))
            failure = answer.outcome.failure  # (its message is encrypted, as every failure's)
            assert failure.application_failure_info.type == "UnopenablePayload", answer
        assert (await snapshot(handle), await received(handle)) == before
        bad = new_id("refund")
        await tower.workflow_service.start_workflow_execution(StartWorkflowExecutionRequest(
            namespace=tower.namespace, workflow_id=bad, workflow_type=WorkflowType(name="refund"),
            task_queue=TaskQueue(name=task_queue), input=Payloads(payloads=[forged]),
            request_id=new_id("r"), identity="mallory"))
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(tower.get_workflow_handle(bad).result(), 30)
        # A good input, but a start memo that cannot be opened (the run reads its memo).
        memo_run = new_id("refund")
        good = (await tower.data_converter.encode([refund_request(tower, memo_run)]))[0]
        await tower.workflow_service.start_workflow_execution(StartWorkflowExecutionRequest(
            namespace=tower.namespace, workflow_id=memo_run,
            workflow_type=WorkflowType(name="refund"), task_queue=TaskQueue(name=task_queue),
            input=Payloads(payloads=[good]), memo=Memo(fields={"tower_pending_gate": forged}),
            request_id=new_id("r"), identity="mallory"))
        memo_handle = tower.get_workflow_handle(memo_run)
        async with asyncio.timeout(30):
            while not (await memo_handle.describe()).close_time and not task_failures(
                    await memo_handle.fetch_history()):
                await asyncio.sleep(0.2)
        assert task_failures(await memo_handle.fetch_history()) == []
        with pytest.raises(WorkflowFailureError) as memo_failed:
            await memo_handle.result()
        assert "could not be opened" in str(memo_failed.value.cause)
    assert "could not be opened: payload encrypted with key 'nope'" in str(failed.value.cause)
    assert refunds(db_path) == []


def test_what_the_workers_own_activities_returned_still_fails_the_task() -> None:
    """Only a run's own context (what clients send) is turned into a refusal: an activity's
    result that cannot be opened (a key removed too early) still fails the workflow task,
    so the run waits for the operator to restore the key instead of failing."""
    plain = tower_data_converter(env={"TOWER_CODEC_KEYS": f"k1={new_key()}"})
    converter = guarded(plain)  # as build_worker and the replayer make it
    sealed = UNOPENABLE["encrypted under a key nobody holds"]
    outside = converter.with_context(WorkflowSerializationContext(namespace="default",
                                                                  workflow_id="w"))
    [opened] = asyncio.run(outside._decode_payload_sequence([sealed]))
    with pytest.raises(UnopenablePayload, match="key 'nope'"):
        outside.payload_converter.from_payload(opened)
    own = converter.with_context(ActivitySerializationContext(
        namespace="default", workflow_id="w", workflow_type="refund", activity_type="pay",
        activity_task_queue="q", activity_id="1", is_local=False))
    with pytest.raises(CodecError, match="key 'nope'"):
        asyncio.run(own._decode_payload_sequence([sealed]))
    # A client (a query's result, `tower state`) keeps the codec's own error.
    with pytest.raises(CodecError, match="key 'nope'"):
        asyncio.run(plain.with_context(WorkflowSerializationContext(
            namespace="default", workflow_id="w"))._decode_payload_sequence([sealed]))
