"""A model call from workflow code: a local activity (only its result is recorded), or an
activity on the task queue (any worker may take it; heartbeats notice a lost worker). A
store the call needs that fails the attempt never fails the run: a local call then goes to
the queue, and a queued call is asked again until a worker can serve it (_store_wait.py).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.failures import STORE_WAITS, Code, types, waits_for_store
from tower.contract.wire import ModelReply, ModelRequest
from tower.temporal._store_wait import wait_for_store
from tower.temporal._task_time import in_a_task

# Let Temporal own retries so every attempt is visible in the event history.
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30), maximum_attempts=6,
    non_retryable_error_types=types(Code.MODEL_REQUEST_REJECTED),
)
# A local call's store errors go straight to the queue's workers (call_local).
LOCAL_RETRY = dataclasses.replace(MODEL_RETRY, non_retryable_error_types=types(
    Code.MODEL_REQUEST_REJECTED, *STORE_WAITS))
# A lost worker's call is retried elsewhere this soon (plus MODEL_RETRY's first second),
# and its readers told (tower/activities/model_stream.py). The activity beats every third
# of it; the SDK sends at most one beat per 80% of it.
MODEL_HEARTBEAT = timedelta(seconds=3)


async def call_local(request: ModelRequest) -> ModelReply:
    """Recorded as one marker holding the result; a worker lost mid-call is noticed at the
    workflow task timeout. No summary: one more payload to convert on every replay."""
    try:
        reply: ModelReply = await workflow.execute_local_activity(
            "call_model", request, result_type=ModelReply,
            start_to_close_timeout=timedelta(seconds=120), retry_policy=LOCAL_RETRY)
    except (ActivityError, ApplicationError) as exc:
        # (A local activity's failure arrives as its own error, not wrapped.)
        if not waits_for_store(exc):
            raise
        reply = await call_queued(request, request.node)
    return reply


async def call_queued(request: ModelRequest, node: str) -> ModelReply:
    """The call as an activity on the task queue, asked again while its store fails."""
    while True:
        since = workflow.now()
        try:
            reply: ModelReply = await workflow.execute_activity(
                "call_model", request, result_type=ModelReply,
                start_to_close_timeout=timedelta(seconds=120), retry_policy=MODEL_RETRY,
                # The activity heartbeats while it waits for the model: a worker killed
                # mid-call is noticed in seconds, not at the start-to-close timeout.
                heartbeat_timeout=MODEL_HEARTBEAT, summary=f"{node} · model")
        except ActivityError as exc:
            # (In a task before anything is decided: the node fails or a timer starts.
            # A local activity resolves within its task: call_local needs no check.)
            await in_a_task(since)
            if not waits_for_store(exc):
                raise
        else:
            await in_a_task(since)
            return reply
        await wait_for_store()
