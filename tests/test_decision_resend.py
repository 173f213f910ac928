"""A decision the server aborted with its workflow task is sent again by Tower's clients
(``tower approve`` and the inbox share ``submit_decision``).

The server fails a task itself when it closes the run while an event arrived meanwhile
(UnhandledCommand), and aborts the updates that task carried: the decision was not taken
and the run still waits. Under load this happens when two approvers race (the approvers'
notice completes as the first decision closes the run). Here it is made to happen every
time: the probe's update handler holds its task until the test has sent a signal.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tower.client._decisions import submit_decision
from tower.contract.decisions import GateStatus
from tower.core.gates import Outcome

# The probe runs unsandboxed, in this process: the test holds its handler with these.
ENTERED = threading.Event()  # the handler runs: its workflow task is in flight
RELEASE = threading.Event()  # the test has sent its signal: the handler may return


@workflow.defn(name="decide-probe", sandboxed=False)
class DecideProbe:
    """Waits for one decision and ends with it, in the task that takes it."""

    def __init__(self) -> None:
        self.outcome: Outcome | None = None

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.outcome is not None)

    @workflow.signal
    def poke(self) -> None:
        """Any event: it arrives while the task that closes the run is in flight."""

    @workflow.update
    def decide(self, message: dict[str, Any]) -> Outcome:
        ENTERED.set()
        RELEASE.wait(8)  # holds this task (under its 10 s timeout; the worker's debug_mode
        # turns off the SDK's 2 s deadlock check, which a loaded machine could reach)
        self.outcome = Outcome(decision_id=message["jti"], gate="probe",
                               result=GateStatus.APPROVED, node="done", status="DONE", step=1)
        return self.outcome


def poke_while_deciding(client: Client, run: str) -> threading.Thread:
    """Once the handler holds its task, send an event, then let the handler finish. In its
    own thread, loop and connection: with the worker's debug_mode the handler runs on the
    test's event loop, which it holds meanwhile."""
    target, namespace = client.service_client.config.target_host, client.namespace

    async def poke() -> None:
        other = await Client.connect(target, namespace=namespace)
        await asyncio.to_thread(ENTERED.wait, 30)
        await other.get_workflow_handle(run).signal("poke")

    def main() -> None:
        try:
            asyncio.run(poke())
        finally:
            RELEASE.set()

    thread = threading.Thread(target=main, name="poke")
    thread.start()
    return thread


async def started(client: Client, task_queue: str) -> Any:
    ENTERED.clear()
    RELEASE.clear()
    return await client.start_workflow(DecideProbe.run, id=f"probe-{uuid.uuid4().hex[:8]}",
                                       task_queue=task_queue)


async def test_a_decision_aborted_with_its_task_is_sent_again(
    client: Client, task_queue: str
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[DecideProbe], debug_mode=True):
        # A plain update: the server aborts it, the run has not taken it and still waits.
        handle = await started(client, task_queue)
        poking = poke_while_deciding(client, handle.id)
        with pytest.raises(RPCError) as aborted:
            await handle.execute_update(DecideProbe.decide, {"jti": "d-1"})
        await asyncio.to_thread(poking.join)
        assert aborted.value.status == RPCStatusCode.FAILED_PRECONDITION
        assert "unexpected workflow task failure" in aborted.value.message
        history = await handle.fetch_history()
        assert [e.workflow_task_failed_event_attributes.cause for e in history.events
                if e.HasField("workflow_task_failed_event_attributes")] == [
            WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND]
        assert not any(e.HasField("workflow_execution_update_accepted_event_attributes")
                       for e in history.events)
        # The same again through Tower's clients' path: sent again, taken once.
        handle = await started(client, task_queue)
        poking = poke_while_deciding(client, handle.id)
        outcome = await submit_decision(handle, {"jti": "d-2"})
        await asyncio.to_thread(poking.join)
        await handle.result()
    assert outcome.decision_id == "d-2" and outcome.result == GateStatus.APPROVED
    history = await handle.fetch_history()
    assert sum(e.HasField("workflow_execution_update_accepted_event_attributes")
               for e in history.events) == 1
