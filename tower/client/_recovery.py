"""Retry from a node: an operator takes a FAILED run back to NODE by Temporal's reset
(`tower retry RUN --from NODE`; `tower fork` makes the same call).

The run's history is replayed here for the log with its event ids; the run is reset to the
workflow task that last took it into NODE, which runs again with today's code. The reset
keeps the workflow id and the chain's first run id, so every side effect keeps its key
(tower/core/keys.py). Signals and updates after that point are not re-applied. Two retries
racing both reset it; Temporal terminates the first new run, and effects still land once.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ResetReapplyExcludeType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

from tower.client._runs import check_started, describe, status_of
from tower.client.errors import ClientError
from tower.contract import search
from tower.core.engine import Transition
from tower.temporal.replay import HistoryError, replay_run, task_completed_after


@dataclass(frozen=True)
class Retried:
    """What `tower retry` did: the reset (``new_run_id``), said in a sentence (``answer``)."""

    run: str
    node: str
    by: str
    answer: str
    new_run_id: str
    skip: int = 0  # transitions the new run replays before it re-enters NODE


def entry_into(log: Sequence[Transition], node: str, nodes: Sequence[str], run: str
               ) -> tuple[Transition, int]:
    """The transition that last took the run into ``node``, and how many transitions came
    before its workflow task; ClientError when there is none."""
    if node not in nodes:
        raise ClientError(f"{node!r} is not a node of this agent (nodes: {', '.join(nodes)})")
    entries = [t for t in log if t.target == node]
    if not entries:
        path = " → ".join([log[0].source, *(t.target for t in log)]) if log else "nothing"
        raise ClientError(f"run {run!r} never entered {node!r} in its last run (its path: "
                       f"{path}); retry from a node it reached")
    last = entries[-1]
    return last, sum(1 for t in log if t.event_id < last.event_id)


def check_retryable(run: str, info: WorkflowExecutionDescription) -> None:
    """ClientError unless RUN ended FAILED (a failed workflow execution)."""
    status = status_of(info)
    agent = info.typed_search_attributes.get(search.AGENT_STATUS) or "?"
    if info.status == WorkflowExecutionStatus.RUNNING:
        raise ClientError(f"run {run!r} is still running ({agent}): retry is for a run that "
                       "ended FAILED")
    if info.status == WorkflowExecutionStatus.FAILED:
        return
    hint = (" (to go back and decide differently: `tower fork RUN --step N`)"
            if agent == "DONE" else "")
    raise ClientError(f"run {run!r} ended {agent if agent != '?' else status} ({status} to "
                   f"Temporal), not FAILED: nothing to retry{hint}")


async def retry(client: Client, run: str, node: str, *, by: str,
                workflows: Sequence[type]) -> Retried:
    """Retry FAILED run RUN from NODE by a reset; ``workflows`` (the project's agents) replay
    its history to find where it last entered NODE."""
    handle = client.get_workflow_handle(run)
    info = await describe(handle)
    check_retryable(run, info)
    await check_started(handle, info)  # its input was refused: a retry repeats that input
    history = await client.get_workflow_handle(run, run_id=info.run_id).fetch_history()
    try:
        result = await replay_run(run, history, workflows=workflows, namespace=client.namespace)
    except HistoryError as exc:
        raise ClientError(str(exc)) from None
    machine = next((m for m in (getattr(w, "machine", None) for w in workflows)
                     if m is not None and m.name == result.workflow_type), None)
    if machine is None:
        raise ClientError(f"{run} is a run of {result.workflow_type!r}, which is not one of "
                          "the given agents")
    entry, skip = entry_into(result.log, node, list(machine.nodes), run)
    completed = task_completed_after(history, entry.event_id)
    if completed is None:  # cannot happen for a closed run; said plainly if it does
        raise ClientError(f"the workflow task that entered {node!r} never completed")
    new_run_id = await reset(client, run, info.run_id or "", completed.event_id,
                             f"tower retry --from {node} by {by} (step {entry.step})")
    return Retried(run, node, by, f"{run} reset to step {entry.step - 1} (before it entered "
                   f"{node}): new run {new_run_id}", new_run_id, skip)


async def reset(client: Client, run: str, run_id: str, finish_event_id: int, reason: str) -> str:
    """Reset ``run_id`` of ``run`` to the workflow task that completed at
    ``finish_event_id``; the new run's id (signals and updates after it not re-applied)."""
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=run, run_id=run_id),
            reason=reason, workflow_task_finish_event_id=finish_event_id,
            request_id=str(uuid.uuid4()),
            reset_reapply_exclude_types=[
                ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL,
                ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE],
        ))
    return response.run_id
