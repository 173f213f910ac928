"""The activities a gate schedules as a request opens: the run id it opens in, the
worker's attestation, and the notice to its approvers (tower/temporal/_gate.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tower.contract.notify import GateNotice
from tower.contract.trust import ATTEST_ACTIVITY, AttestRequest
from tower.temporal._task_time import call_activity

NOTIFY_ATTEMPTS = 5
RUN_ID_ACTIVITY = "tower_run_id"


async def opening_run_id() -> str:
    """The run id a request opens in, recorded (an activity): a reset run replays earlier
    requests under a new ``workflow.info().run_id`` and would refuse the decisions its
    history shows accepted. Not a local activity: its marker could land a task early."""
    # The gate opens in a workflow task, never in a query's replay (``call_activity``).
    return await call_activity(
        RUN_ID_ACTIVITY, result_type=str, start_to_close_timeout=timedelta(seconds=10),
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                 maximum_interval=timedelta(seconds=10)),
        summary="the run id this request opens in")


async def attestation(request: AttestRequest) -> str:
    """The deployment's worker vouching for this request: its token, or "" when it has no
    key or cannot answer (the request is then unlisted, still decidable by run id)."""
    # A decision may come in the same workflow task as the answer: the memo is upserted
    # there, after it, never in an activation a worker ran for a query (``call_activity``).
    try:
        return await call_activity(
            ATTEST_ACTIVITY, request, result_type=str,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5),
                                     maximum_attempts=3),
            summary=f"attest request · gate {request.gate}")
    except ActivityError as exc:
        workflow.logger.warning("gate %s: request not attested: %s", request.gate, exc)
        return ""


def notify(notice: GateNotice) -> None:
    """Tell the tenant's approvers (its webhook). Not awaited: the wait for a decision
    starts at once; a failure after the retries is only logged."""
    sent = workflow.start_activity(
        "notify_gate", notice, start_to_close_timeout=timedelta(seconds=20),
        retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1),
                                 maximum_interval=timedelta(seconds=10),
                                 maximum_attempts=NOTIFY_ATTEMPTS),
        summary=f"notify approvers · gate {notice.gate}")
    sent.add_done_callback(lambda done: _log_unsent(notice.gate, done))


@activity.defn  # named by the function: RUN_ID_ACTIVITY
async def tower_run_id() -> str:
    """The run id of the workflow run that calls it (``opening_run_id``)."""
    run_id = activity.info().workflow_run_id
    assert run_id is not None, "called outside a workflow run"
    return run_id


def _log_unsent(gate: str, done: Any) -> None:
    if not done.cancelled() and done.exception() is not None:
        workflow.logger.warning("gate %s: approvers not notified: %s", gate, done.exception())
