"""A query that a worker's replay answered ahead of the run's own task is asked again.

A worker that replays an uncached run to answer a query can reach an event (a tool's
result) before the workflow task that will carry it; it then fails that activation
(``tower.temporal._task_time``) rather than let the run wait on time that will not move.
The query fails with ``AHEAD_OF_ITS_TASK``; asked again a moment later, once the task has
run, it is answered. Every Tower client asks again here, so no caller sees the race.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowQueryFailedError,
)

AHEAD_OF_ITS_TASK = ("a query's replay reached an event no workflow task has taken yet; "
                     "the run is replayed again in that task")
TRIES = 15  # about ten seconds: a task that takes a flood of signals takes a few


class QueryAskedAgain(Interceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _AskAgain(next)


class _AskAgain(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        for attempt in range(1, TRIES + 1):
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as exc:
                if AHEAD_OF_ITS_TASK not in str(exc) or attempt == TRIES:
                    raise
                await asyncio.sleep(min(0.1 * attempt, 1.0))  # the event's own task runs
        raise AssertionError("unreachable")
