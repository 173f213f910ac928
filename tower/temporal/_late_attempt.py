"""An attempt the server has already timed out ends in one line, not a traceback.

When an attempt's heartbeat arrives late (a loaded host, a long pause), the server times
the attempt out and schedules the next one; the worker then cancels the late attempt. Left
alone, that cancellation ends the activity as an unexplained ``CancelledError`` with a
traceback at WARNING, though nothing is wrong with the run: Temporal retries it, and the
server ignores whatever the late attempt reports. ``TowerPlugin`` installs this interceptor
on every worker: such an attempt logs one warning naming the activity and attempt, and
completes as a benign failure. A cancellation for any other reason (the run asked, the
worker is shutting down, a reset) is left as it was.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.exceptions import CancelledError as TemporalCancelled
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

TIMED_OUT_TYPE = "AttemptTimedOut"


class LateAttemptsEndQuietly(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next)


class _Inbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await super().execute_activity(input)
        except (asyncio.CancelledError, TemporalCancelled):
            details = activity.cancellation_details()
            # (The server answers a late heartbeat with "not found": that attempt is over.)
            if details is None or not (details.timed_out or details.not_found):
                raise
            info = activity.info()
            reason = (f"attempt {info.attempt} of activity {info.activity_type!r} "
                      f"(run {info.workflow_run_id}) was timed out by the server (a heartbeat "
                      "or its deadline came late) and stopped; Temporal runs the next attempt")
            activity.logger.warning(reason)
            raise ApplicationError(reason, type=TIMED_OUT_TYPE,
                                   category=ApplicationErrorCategory.BENIGN) from None
