"""Tower's housekeeping as Temporal work: a Schedule starts ``TowerStoreCleanup`` every
``every``, which runs the cleanup activity (tower/activities/cleanup.py) on any worker of
the queue. One schedule per namespace and queue; every worker may ensure it at start-up."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    SchedulePolicy,
    ScheduleSpec,
)
from temporalio.common import RetryPolicy
from temporalio.service import RPCError

from tower.activities.cleanup import CLEANUP_ACTIVITY

EVERY = timedelta(hours=1)
log = logging.getLogger("tower.stores")


@workflow.defn(name="tower_store_cleanup")
class TowerStoreCleanup:
    """One cleanup pass: returns how many runs' entries each store lost."""

    @workflow.run
    async def run(self, retention_seconds: float | None = None) -> dict[str, int]:
        removed: dict[str, int] = await workflow.execute_activity(
            CLEANUP_ACTIVITY, retention_seconds, result_type=dict,
            start_to_close_timeout=timedelta(minutes=30), heartbeat_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_interval=timedelta(minutes=5), maximum_attempts=5))
        return removed


def schedule_id(task_queue: str) -> str:
    return f"tower-store-cleanup-{task_queue}"


async def ensure_cleanup(client: Client, task_queue: str, every: timedelta = EVERY,
                         first: datetime | None = None) -> bool:
    """Create the cleanup schedule for ``task_queue`` unless it exists, its first pass not
    before ``first``; True if made now."""
    try:
        await client.create_schedule(schedule_id(task_queue), Schedule(
            action=ScheduleActionStartWorkflow(TowerStoreCleanup.run, id=schedule_id(
                task_queue), task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)],
                              start_at=first),
            # One pass at a time; a pass missed while no worker ran is not made up twice.
            policy=SchedulePolicy()))
    except ScheduleAlreadyRunningError:
        return False
    except RPCError as exc:  # e.g. an identity without the right to schedule: say so, go on
        log.warning("the stores' retention schedule %s was not made (%s): ask an operator "
                    "to run a worker that may create it (docs/production.md)",
                    schedule_id(task_queue), exc)
        return False
    return True
