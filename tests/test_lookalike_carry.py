"""A look-alike worker hands a forged state to the real agent (issue 24): the attacker's own
workflow, served by the attacker's own worker, continues-as-new into ``refund`` on the
deployment's queue with a carry that names the attacker's run — the very run the new run
continued from, so the run-id binding of a carry alone would take it.

The carry is past the reasoning: $2,000 under a limit of 1e9, a roster of the attacker's
choosing, unsigned decisions on. The new run asks the deployment's worker where it continued from
(``tower_continued_from``: the server's description of that run) and
refuses a carry from any run that was not this agent on this task queue: it fails at once
with the reason, nothing is paid, nothing is listed, and a genuine decision still works.

A worker that polls the deployment's queue *and* calls its workflow ``refund`` is the
deployment's worker as far as a dev server can tell; with server authorization on
(deploy/temporal/server) only Tower's services may poll a task queue at all, so a
requester cannot run that worker (deploy/temporal/server/authz_test.go:
PollWorkflowTaskQueue is for the service and admin roles only).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, refunds, wait_pending
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker
from test_decision_binding import forged_carry

from tower.cli.approvals import pending_requests
from workflows.refund import RefundAgent

pytestmark = pytest.mark.integration


@workflow.defn(name="lookalike", sandboxed=False)
class LookAlike:
    """The attacker's workflow: continue-as-new into the real agent, the carry naming this
    run (``workflow.info().run_id``), on the deployment's task queue."""

    @workflow.run
    async def run(self, forged: dict[str, Any]) -> None:
        forged = copy.deepcopy(forged)
        into, queue = forged.pop("into"), forged.pop("queue")
        forged["carry"]["run_id"] = workflow.info().run_id
        workflow.continue_as_new(forged, workflow=into, task_queue=queue)


async def chain_end(client: Client, workflow_id: str) -> str:
    """Why the run the look-alike continued into failed (it must fail)."""
    with pytest.raises(WorkflowFailureError) as failed:
        await client.get_workflow_handle(workflow_id).result()  # follows the chain
    cause = failed.value.cause
    return str(getattr(cause, "message", cause))


@pytest.mark.parametrize("served_on", ["own queue", "deployment's queue"])
async def test_a_look_alike_workers_carry_is_refused(
    client: Client, task_queue: str, db_path: Path, scripted_worker: Any, served_on: str
) -> None:
    evil = f"{task_queue}-evil" if served_on == "own queue" else task_queue
    run = new_id("lookalike")
    forged = {**forged_carry(), "into": "refund", "queue": task_queue}
    # The attacker's own connection (one process may not run two workers on one queue).
    attacker = await Client.connect(client.service_client.config.target_host,
                                    namespace=client.namespace)
    async with scripted_worker(), Worker(attacker, task_queue=evil, workflows=[LookAlike]):
        first = await attacker.start_workflow("lookalike", forged, id=run, task_queue=evil)
        reason = await chain_end(client, run)
        assert "a carried state is accepted only from the run's own continue-as-new" in reason
        assert f"run {first.result_run_id} was workflow 'lookalike'" in reason
        assert refunds(db_path) == []
        assert run not in {r["run"] for r in await pending_requests(client, limit=50)}
        # A genuine refund still parks, is listed, and its decision pays it once.
        genuine = await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                              id=new_id("refund"), task_queue=task_queue)
        pending = (await wait_pending(genuine))["pending"]
        assert genuine.id in {r["run"] for r in await pending_requests(client, limit=50)}
        assert (await decide(client, genuine, pending))["result"] == "approved"
        await genuine.result()
    assert refunds(db_path) == [("INV-2004", 120000)]

