"""A worker runs an activity only for a run of its own agents on its own task queue.

On a server without authorization, anyone who runs a worker of their own can have a workflow
of theirs, on their own queue, schedule any activity on the deployment's queue — a tool that
pays, with an ``Authority`` and arguments of their choosing — and the deployment's worker
would run it: a tool cannot tell who scheduled it. ``TowerPlugin`` installs this guard on
every worker: before any activity runs, the scheduling run (``activity.info()``: its
workflow type, id and run id, set by the server) must be a workflow this worker hosts, and the
server's description of that run must say it runs on this worker's task queue. Otherwise the
activity fails, not retryable, naming why, and nothing of it runs. The verdict is kept per
run id (one description per run, not per activity). Activities are not replayed, so a replay
does not change. A worker hosting no workflows (activities only), or a dynamic one, checks
the queue alone.

What it cannot tell apart: a worker polling this very queue with a workflow named like one
of its agents is, to a server without authorization, this deployment's worker (it would get
genuine runs' tasks too). Tower's server build lets only its services poll (docs/approvals.md).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from tower.contract.failures import Code, TowerError, failure
from tower.temporal._machine_run import run_origin

_REMEMBERED = 4096  # runs whose verdict is kept (oldest dropped first)


class ScheduledByOwnAgents(Interceptor):
    """Refuses an activity scheduled by a run that is not one of ``hosted`` (workflow type
    names; empty: any) on this worker's task queue; ``client`` (the worker's) describes it."""

    def __init__(self, client: Client, hosted: Collection[str]) -> None:
        self.client = client
        self.hosted = frozenset(hosted)
        self.verdicts: dict[str, str] = {}  # run id -> "" (ours) or why not

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next, self)

    async def refusal(self) -> str:
        """Why the run that scheduled the current activity may not ("" when it may)."""
        info = activity.info()
        if self.hosted and info.workflow_type not in self.hosted:
            return (f"activity {info.activity_type!r} was scheduled by workflow "
                    f"{info.workflow_type!r}, which this worker does not host")
        run_id = info.workflow_run_id or ""
        if run_id not in self.verdicts:
            self.verdicts[run_id] = await self._queue_refusal(info)
            while len(self.verdicts) > _REMEMBERED:
                del self.verdicts[next(iter(self.verdicts))]
        return self.verdicts[run_id]

    async def _queue_refusal(self, info: activity.Info) -> str:
        # The worker's client: activity.client() exists only in async activities.
        was = await run_origin(self.client, info.workflow_id or "", info.workflow_run_id or "")
        if was == (info.workflow_type, info.task_queue):
            return ""
        return (f"activity {info.activity_type!r} was scheduled by run {info.workflow_run_id} "
                f"of workflow {was[0]!r} on task queue {was[1]!r}; this worker runs "
                f"activities only for its own runs on task queue {info.task_queue!r}")


class _Inbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, guard: ScheduledByOwnAgents) -> None:
        super().__init__(next)
        self.guard = guard

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        refused = await self.guard.refusal()
        if refused:
            raise failure(TowerError(f"refused: {refused}", code=Code.ACTIVITY_REFUSED))
        return await super().execute_activity(input)
