"""An attempt the server timed out (its heartbeat came late) ends in one warning line, and
the next attempt finishes the run: no traceback, nothing for a log scan to flag."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tower.contract.failures import Code
from tower.temporal import TowerPlugin


@activity.defn
async def slow_first_time() -> int:
    activity.heartbeat()
    if activity.info().attempt == 1:
        await asyncio.sleep(2.5)  # a pause: the server times this attempt out ...
        for _ in range(300):  # ... and the next heartbeat's answer says so
            activity.heartbeat()
            await asyncio.sleep(0.1)
    return activity.info().attempt


@workflow.defn
class OneSlowActivity:
    @workflow.run
    async def run(self) -> int:
        return await workflow.execute_activity(
            slow_first_time, start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)))


async def test_a_timed_out_attempt_logs_one_line_and_the_next_finishes(
        env: WorkflowEnvironment, caplog: pytest.LogCaptureFixture) -> None:
    queue = f"late-{uuid.uuid4().hex[:8]}"
    caplog.set_level(logging.DEBUG, logger="temporalio.activity")
    async with Worker(env.client, task_queue=queue, workflows=[OneSlowActivity],
                      activities=[slow_first_time], plugins=[TowerPlugin()]):
        attempt = await env.client.execute_workflow(
            OneSlowActivity.run, id=f"late-{uuid.uuid4()}", task_queue=queue,
            execution_timeout=timedelta(seconds=60))
        # The late attempt learns it is over at its next heartbeat's answer, which may come
        # after the run ended: the worker stays up until then (a shutdown cancels otherwise).
        async with asyncio.timeout(20):
            while not [r for r in caplog.records if "was timed out by" in r.getMessage()]:
                await asyncio.sleep(0.2)
    assert attempt == 2
    records = [r for r in caplog.records if r.name == "temporalio.activity"]
    late = [r for r in records if "was timed out by the server" in r.getMessage()]
    assert len(late) == 1 and late[0].levelno == logging.WARNING, records
    assert "attempt 1 of activity 'slow_first_time'" in late[0].getMessage()
    assert late[0].exc_info is None
    # The late attempt completed as a benign failure, not as an unexplained CancelledError.
    failed = [r for r in records if r.getMessage().startswith("Completing activity as failed")]
    assert all(r.levelno == logging.DEBUG for r in failed), [r.getMessage() for r in failed]
    assert all(Code.ATTEMPT_TIMED_OUT in repr(r.exc_info) or r.exc_info is None for r in failed)
