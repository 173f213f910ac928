"""The checker's report on a run that did not settle says why, from the real server: the
pending activity with its attempts and last failure, or the workflow task failing on every
attempt with its message — what a stuck run's next investigator needs when CI shows only
the output and the trial's server is gone (tests/jepsen/stuck.py)."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from datetime import timedelta
from pathlib import Path

from jepsen.check import RunView, check
from jepsen.stuck import why_stuck
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities.tools.db import connect

WAIT_SECONDS = 120.0  # for the server to retry (a bound, not a measure: busy CI machines)
FAST = RetryPolicy(initial_interval=timedelta(milliseconds=100),
                   maximum_interval=timedelta(milliseconds=200))


@activity.defn(name="gateway_down")
async def gateway_down() -> None:
    raise ApplicationError("the model gateway is down", type="GatewayDown")


@workflow.defn(name="stuck_on_an_activity", sandboxed=False)
class StuckOnAnActivity:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(gateway_down, start_to_close_timeout=timedelta(
            seconds=30), retry_policy=FAST)


@workflow.defn(name="stuck_on_its_task", sandboxed=False)
class StuckOnItsTask:
    @workflow.run
    async def run(self) -> None:  # not an ApplicationError: the task fails, and is retried
        raise RuntimeError("this history does not suit the code")


async def plain(client: Client) -> Client:
    """A connection without Tower's plugin: these workflows are not Tower agents."""
    return await Client.connect(client.service_client.config.target_host,
                                namespace=client.namespace)


async def attempts(client: Client, wid: str, pending: str) -> int:
    """Poll the server until the run's pending activity or workflow task is on its 3rd
    attempt (or 2nd for a task: the server backs off longer); the attempt seen."""
    async def seen() -> int:
        while True:
            raw = (await client.get_workflow_handle(wid).describe()).raw_description
            if pending == "activity" and raw.pending_activities:
                attempt = raw.pending_activities[0].attempt
            elif pending == "task" and raw.HasField("pending_workflow_task"):
                attempt = raw.pending_workflow_task.attempt + 1  # counted as the 3rd
            else:
                attempt = 0
            if attempt >= 3:
                return attempt
            await asyncio.sleep(0.2)
    return await asyncio.wait_for(seen(), WAIT_SECONDS)


async def test_a_stuck_runs_report_names_its_failing_activity(client: Client,
                                                              tmp_path: Path) -> None:
    raw = await plain(client)
    queue, wid = f"stuck-{uuid.uuid4().hex[:8]}", f"stuck-act-{uuid.uuid4().hex[:8]}"
    async with Worker(raw, task_queue=queue, workflows=[StuckOnAnActivity],
                      activities=[gateway_down]):
        handle = await raw.start_workflow("stuck_on_an_activity", id=wid, task_queue=queue)
        try:
            await attempts(raw, wid, "activity")
            why = await why_stuck(raw, wid)
        finally:
            await handle.terminate("test over")
    assert why.startswith("temporal RUNNING"), why
    found = re.search(r"pending activity gateway_down \(id 1\) \w+, attempt (\d+) of "
                      r"unlimited", why)
    assert found and int(found.group(1)) >= 3, why
    assert "last failure: GatewayDown: the model gateway is down" in why, why
    assert "ACTIVITY_TASK_SCHEDULED" in why, why  # the events it ended on
    # ... and the checker's violation carries it.
    db_path = tmp_path / "tools.sqlite"
    connect(db_path).close()
    state = {"status": "RUNNING", "node": "confirm"}
    [problem] = check(db_path, "INV-0000", 100, [RunView(wid, state, why_stuck=why)])
    assert problem == f"{wid}: stuck at confirm (RUNNING): {why}"


async def test_a_stuck_runs_report_names_its_failing_workflow_task(client: Client,
                                                                   tmp_path: Path) -> None:
    raw = await plain(client)
    queue, wid = f"stuck-{uuid.uuid4().hex[:8]}", f"stuck-task-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "worker-0.log"  # the worker's log, written as worker.py writes it
    handler = logging.FileHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("temporalio").addHandler(handler)
    try:
        async with Worker(raw, task_queue=queue, workflows=[StuckOnItsTask]):
            handle = await raw.start_workflow("stuck_on_its_task", id=wid, task_queue=queue)
            try:
                await attempts(raw, wid, "task")
                why = await why_stuck(raw, wid, [log, tmp_path / "worker-1.log"])
            finally:
                await handle.terminate("test over")
    finally:
        logging.getLogger("temporalio").removeHandler(handler)
        handler.close()
    found = re.search(r"pending workflow task \w+, attempt (\d+)", why)
    assert found and int(found.group(1)) >= 2, why
    assert re.search(r"workflow task failing since the last completed one .*, the last: "
                     r"event \d+, workflow_worker_unhandled_failure: RuntimeError: "
                     r"this history does not suit the code", why), why
    # The worker's log says it too: the failed activation and its exception.
    assert re.search(rf"worker logs: worker-0.log: .* Failed activation on workflow "
                     rf"stuck_on_its_task with ID {wid} .* … RuntimeError: this history does "
                     r"not suit the code", why), why


async def test_a_run_that_cannot_be_described_says_so(client: Client) -> None:
    why = await why_stuck(client, f"no-such-run-{uuid.uuid4().hex[:8]}")
    assert why.startswith("could not describe it: RPCError"), why
