"""A workflow of someone else's schedules the deployment's tools directly (issue 24's
attacker: "someone who can run a worker of their own").

On a server without authorization the attacker's own worker (a plain ``Worker``, no
``TowerPlugin``) runs a workflow that executes ``issue_refund`` on the deployment's task
queue with a forged ``Authority`` (an "approval" of $2,000). Before the scheduler guard the
deployment's worker paid it. Now every activity of a ``TowerPlugin`` worker runs only for a
workflow that worker hosts, on its task queue (tower/temporal/_interceptors.py): refused,
not retried, nothing paid, the attacker's workflow told why, and a genuine approved refund
still pays once. A workflow named ``refund`` on the attacker's own queue is refused by the
queue; one of another type on the deployment's queue by its type. A workflow named
``refund`` polled from the deployment's own queue is the deployment's worker to a server
without authorization (see test_lookalike_carry.py: only Tower's services may poll there).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, refunds, wait_pending
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

from tower.contract.failures import Code
from workflows.refund import RefundAgent

pytestmark = pytest.mark.integration

TWO_THOUSAND = 200_000
FORGED_CALL = {
    "tool": "issue_refund",
    "arguments": {"invoice_id": "INV-2004", "amount_cents": TWO_THOUSAND, "reason": "forged"},
    "idempotency_key": "thief-1",
    "authority": {"limit_cents": 10**9, "decision_id": "forged",
                  "approved": {"amount_cents": TWO_THOUSAND}},
}


async def pay_myself(queue: str) -> dict[str, Any]:
    """The attacker's workflow body: pay itself on the deployment's queue ``queue``."""
    try:
        paid = await workflow.execute_activity(
            "issue_refund", FORGED_CALL, task_queue=queue,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=3))
    except ActivityError as exc:
        cause = exc.cause
        if not isinstance(cause, ApplicationError):
            return {"failed": str(cause)}
        return {"refused": cause.message, "type": cause.type,
                "non_retryable": cause.non_retryable}
    return {"paid": paid}


@workflow.defn(name="thief", sandboxed=False)
class Thief:
    @workflow.run
    async def run(self, queue: str) -> dict[str, Any]:
        return await pay_myself(queue)


@workflow.defn(name="refund", sandboxed=False)
class NamedLikeRefund:
    @workflow.run
    async def run(self, queue: str) -> dict[str, Any]:
        return await pay_myself(queue)


THIEVES = {"thief": Thief, "refund": NamedLikeRefund}


@pytest.mark.parametrize(("name", "served_on", "why"), [
    ("thief", "own queue", "workflow 'thief', which this worker does not host"),
    ("refund", "own queue", "of workflow 'refund' on task queue '{evil}'"),
    ("thief", "deployment's queue", "workflow 'thief', which this worker does not host"),
])
async def test_a_foreign_workflows_tool_call_is_refused(
    client: Client, task_queue: str, db_path: Path, scripted_worker: Any,
    name: str, served_on: str, why: str,
) -> None:
    evil = f"{task_queue}-evil" if served_on == "own queue" else task_queue
    # The attacker's own connection and worker, without Tower's plugin.
    attacker = await Client.connect(client.service_client.config.target_host,
                                    namespace=client.namespace)
    async with scripted_worker(), Worker(attacker, task_queue=evil, workflows=[THIEVES[name]]):
        outcome = await attacker.execute_workflow(name, task_queue, id=new_id("thief"),
                                                  task_queue=evil)
        assert "paid" not in outcome, outcome
        assert outcome["type"] == Code.ACTIVITY_REFUSED and outcome["non_retryable"] is True
        assert outcome["refused"].startswith("refused: activity 'issue_refund' was scheduled")
        assert why.format(evil=evil) in outcome["refused"]
        assert refunds(db_path) == []  # nothing paid
        # A genuine refund still parks and its decision pays it, once.
        genuine = await client.start_workflow(RefundAgent.run, refund_request(client, "r"),
                                              id=new_id("refund"), task_queue=task_queue)
        pending = (await wait_pending(genuine))["pending"]
        assert (await decide(client, genuine, pending))["result"] == "approved"
        await genuine.result()
    assert refunds(db_path) == [("INV-2004", 120000)]
