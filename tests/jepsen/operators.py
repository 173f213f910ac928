"""The operator's actions in a trial, all in this one place: retry a FAILED run, fork a DONE
one back to just before it paid. Each is the real operator path (`tower retry`, a reset to
the task that entered the node; `tower fork`'s reset)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gatekit import send_retry
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ResetReapplyExcludeType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle

from tower.temporal.replay import task_completed_after

from .bounds import RPC_SECONDS

RPC_TIMEOUT = timedelta(seconds=RPC_SECONDS)
EXCLUDE_DECISIONS = [ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL,
                     ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE]


def retry_node(state: dict[str, Any]) -> str:
    """Where an operator takes a FAILED run back to: the payment if it had planned one."""
    return "issue_refund" if state.get("invoice_id") else "reason"


async def retry(client: Client, run: str, node: str) -> None:
    await send_retry(client, run, node, "checker")


async def fork_at_payment(client: Client, handle: WorkflowHandle[Any, Any],
                          request_id: str) -> bool:
    """Reset the run to just before it paid: the fork repeats the same approved action."""
    log: list[dict[str, Any]] = await handle.query("transitions", result_type=list,
                                                   rpc_timeout=RPC_TIMEOUT)
    entering = [t for t in log if t["target"] == "issue_refund"]
    if not entering:
        return False
    history = await handle.fetch_history(rpc_timeout=RPC_TIMEOUT)
    completed = task_completed_after(history, entering[-1]["event_id"])
    if completed is None:
        return False
    run_id = (await handle.describe(rpc_timeout=RPC_TIMEOUT)).run_id
    await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=run_id),
        reason="checker: fork at issue_refund", request_id=request_id,
        workflow_task_finish_event_id=completed.event_id,
        reset_reapply_exclude_types=EXCLUDE_DECISIONS), timeout=RPC_TIMEOUT)
    return True
