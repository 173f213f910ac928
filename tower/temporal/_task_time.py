"""Act on an activity's result or a timer only inside a workflow task.

A worker answering a query for a run it has not cached replays the history. When that
history already holds an event past the last completed workflow task (an activity's result
whose task still waits for a worker), the worker runs the workflow code on it outside any
task, and sends the commands it made with the run's next task, *before* what that task adds.
If that task also accepts a ``decide`` update, a replay orders them the other way: TMPRL1100,
and the run can no longer be replayed (docs/reliability.md tells how it was found).

Such an activation made no workflow time pass since the code began to wait (a result or a
timer always comes in a later task, with a later start time). ``in_a_task`` then fails the
activation: the worker drops the run from its cache, the query is answered from a fresh
replay, and the task that carries the event replays the run whole. Waiting there instead
hung runs (tests/test_stuck_after_query.py). Anywhere else it returns without yielding, so
commands and their order are unchanged.

The query meanwhile fails with ``AHEAD_OF_ITS_TASK``; ``QueryAskedAgain``, on every Tower
client, asks it again once the task has run, so no caller sees the race. An activity the
workflow awaits goes through ``call_activity``, which checks; ``TaskBudget`` counts per task.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import ActivityError

from tower.contract.failures import Code, TowerError

AHEAD_OF_ITS_TASK = ("a query's replay reached an event no workflow task has taken yet; "
                     "the run is replayed again in that task")
TRIES = 15  # about ten seconds: a task that takes a flood of signals takes a few
STORE_WAIT = timedelta(seconds=30)  # between rounds of a call's store retries (wait_for_store)
T = TypeVar("T")


class AheadOfItsTask(TowerError):
    """Not a failure type: the activation fails and the worker drops the run, nothing else."""

    CODE = Code.AHEAD_OF_ITS_TASK


async def in_a_task(since: datetime) -> None:
    """Fail this activation if workflow time has not moved past ``since`` (when the code
    began to wait for the event it has just been handed): a query's replay ran it."""
    if workflow.now() == since:
        raise AheadOfItsTask(AHEAD_OF_ITS_TASK)


async def call_activity(name: str, *args: Any, result_type: type[T], **options: Any) -> T:
    """``workflow.execute_activity``, its result or failure acted on only in a workflow task
    (``in_a_task``): a decision may come in that same task."""
    since = workflow.now()
    try:
        result: T = await workflow.execute_activity(name, *args, result_type=result_type,
                                                    **options)
    except ActivityError:
        await in_a_task(since)
        raise
    await in_a_task(since)
    return result


async def wait_for_store() -> None:
    """A call that failed on a store (tower/activities/stores.py; the payload store:
    tower/temporal/payloads.py) whose retries ran out while the store is still away is asked
    again after ``STORE_WAIT``, round after round, with the same idempotency key, so an effect
    made before its result was stored is not made twice: it never fails its run."""
    since = workflow.now()
    await workflow.sleep(STORE_WAIT)
    await in_a_task(since)


class TaskBudget:
    """At most ``limit`` of something per workflow task, so that a flood in one task does
    not keep it past the SDK's deadlock timeout.

    A task is told apart by the history's length, so a replay counts the same. ``by_time``
    also tells tasks apart by their time, for update validators: a refused update never
    reaches the history, so a budget keyed on its length alone stayed spent after a flood,
    refusing a genuine update too. Validators never run on replay, so time is safe there."""

    def __init__(self, limit: int, *, by_time: bool = False) -> None:
        self.limit = limit
        self.by_time = by_time
        self.task_time = datetime.min  # workflow.now() when this task's count began
        self._mark: tuple[int, datetime] | None = None
        self._used = 0

    def take(self) -> bool:
        """Count one; whether it is within this task's budget."""
        now = workflow.now()
        mark = (workflow.info().get_current_history_length(),
                now if self.by_time else datetime.min)
        if mark != self._mark:
            self._mark, self._used, self.task_time = mark, 0, now
        self._used += 1
        return self._used <= self.limit


class QueryAskedAgain(Interceptor):
    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _AskAgain(next)


class _AskAgain(OutboundInterceptor):
    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        for attempt in range(1, TRIES):
            try:
                return await super().query_workflow(input)
            except WorkflowQueryFailedError as exc:
                if AHEAD_OF_ITS_TASK not in str(exc):
                    raise
                await asyncio.sleep(min(0.1 * attempt, 1.0))  # the event's own task runs
        return await super().query_workflow(input)
