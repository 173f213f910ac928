"""A run whose tool's result a query's replay already applied goes on in its next workflow
task, with nothing else arriving (no decision, no signal): never RUNNING with nothing
pending (tower/temporal/_task_time.py).

The hang the issue reports (2 of 7 runs, worker SIGKILLed while ``issue_refund`` waited on
its database lock): the worker that had the run cached is gone while the tool runs; a query
waits on its sticky queue, then goes to the other worker, whose replay already holds the
tool's result — the code waits there for a workflow task to start. The task that carries
the result brings the code nothing new (its events were applied by the query's replay), so
the code must still go on in it: else the task completes with no command, and the run, its
refund paid, waits for an unrelated signal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import uuid
from pathlib import Path
from typing import Any

from gatekit import refund_request, refunds
from procs import WorkerProcess
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.worker import Worker
from workerkit import activities

from tower.activities.model import ModelSettings
from tower.activities.own import WorkerSettings, tower_activities
from tower.contract.wire import ToolCall
from tower.temporal import TowerPlugin
from tower.temporal._start import scripts_of
from worker import build_worker
from workflows.refund import RefundAgent
from workflows.registry import AGENTS

RELEASE_AFTER = 5.0  # as in test_query_replay_order.py: before the query leaves the queue
SETTLE_SECONDS = 60.0


async def test_a_run_goes_on_after_a_query_replayed_its_tools_result(
        client: Client, task_queue: str, db_path: Path, tmp_path: Path) -> None:
    answer = asyncio.Event()
    loop = asyncio.get_running_loop()
    real = next(a for a in activities(list(AGENTS.values()), db_path=db_path)
                if a.__name__ == "issue_refund")

    @activity.defn(name="issue_refund")
    def refund_when_told(call: ToolCall) -> dict[str, Any]:
        asyncio.run_coroutine_threadsafe(answer.wait(), loop).result()
        result: dict[str, Any] = real(call)
        return result

    settings = WorkerSettings(models=ModelSettings(), streams=db_path.with_name("streams.sqlite"),
                              messages=db_path.with_name("messages.sqlite"))
    tower_own, _ = tower_activities(settings, scripts_of(AGENTS.values()))
    own = [a for a in [*activities(list(AGENTS.values()), db_path=db_path), *tower_own]
           if a.__name__ != "issue_refund"]
    with sqlite3.connect(db_path) as db:
        db.execute("INSERT INTO invoices VALUES ('INV-7002', 'ACC-1001', 400000, 'paid', "
                   "'2026-11-20')")
    first = WorkerProcess(client.service_client.config.target_host, task_queue, db_path, "",
                          tmp_path / "worker.log", argv=("tests/workflow_worker.py",))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TOWER_MODELS"):
        first.env.pop(name, None)
    first.start()
    try:
        async with Worker(client, task_queue=task_queue, activities=[*own, refund_when_told],
                          activity_executor=concurrent.futures.ThreadPoolExecutor(4),
                          plugins=[TowerPlugin()]):
            run = f"stuck-after-query-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(
                RefundAgent.run, refund_request(client, run, limit_cents=50_000,
                                                message="Please refund $300 on invoice INV-7002"),
                id=run, task_queue=task_queue)
            await running(handle, "issue_refund")
            first.kill9()  # the worker that has the run cached is gone; its sticky queue stays
            async with build_worker(client, task_queue=task_queue, db_path=db_path,
                                    models=ModelSettings(), no_remote_activities=True):
                query = asyncio.create_task(handle.query("state", result_type=dict))
                await asyncio.sleep(RELEASE_AFTER)
                answer.set()
                try:  # answered by this worker, from its replay; or failed there (it was
                    await query  # ahead of its task), and a client asks again
                except WorkflowQueryFailedError as failed:
                    assert "no workflow task has taken yet" in str(failed)
                try:
                    state = await asyncio.wait_for(handle.result(), SETTLE_SECONDS)
                except TimeoutError:
                    raw = (await handle.describe()).raw_description
                    raise AssertionError(
                        f"stuck: pending activities {len(raw.pending_activities)}, "
                        f"workflow task {raw.HasField('pending_workflow_task')}") from None
    finally:
        first.stop()
    assert state.status == "DONE" and state.refund_id
    assert refunds(db_path) == [("INV-7002", 30_000)]


async def running(handle: Any, name: str) -> None:
    async with asyncio.timeout(120):
        while True:
            pending = (await handle.describe()).raw_description.pending_activities
            if any(p.activity_type.name == name for p in pending):
                return
            await asyncio.sleep(0.2)
