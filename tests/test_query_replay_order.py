"""A decision and the gate's attestation in one workflow task, after a query replayed the
run on another worker: the history still replays (tower/temporal/_task_time.py).

The nondeterminism the randomized checker found (trial 37: TMPRL1100 "Update machine does
not handle this event: HistoryEvent(id: 61, WorkflowPropertiesModified)"), made to happen
every time: the worker that had the run cached is gone while the attestation runs; a query
waits on its sticky queue, then goes to the other worker, whose replay already holds the
attestation's result (the task that will carry it waits on the same dead sticky queue);
the decision is sent meanwhile and rides that task, which the other worker takes with the
run still cached. Before the fix the worker had run the gate's code on the result while
answering the query, and sent its memo before the decision's acceptance: the recorded order
no replay makes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, refund_request, refunds
from procs import WorkerProcess
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory, WorkflowQueryFailedError
from temporalio.worker import Worker
from workerkit import activities

from activities.tools import ToolsDb
from tower.activities.model import ModelSettings
from tower.activities.own import WorkerSettings, tower_activities
from tower.activities.trust import Trust
from tower.contract.trust import AttestRequest
from tower.temporal import TowerPlugin
from tower.temporal._start import scripts_of
from tower.temporal.replay import replay
from worker import build_worker
from workflows.refund import RefundAgent
from workflows.registry import AGENTS

# A SIGKILLed worker's sticky queue holds the query (and the task after the attestation)
# 10 s (the worker's default) before the server hands them to the other worker.
# The attestation answers this long after the query was sent: before the query leaves the
# sticky queue (so the history it is answered from holds the answer) and well within the
# attestation's 10 s timeout; the decision must then reach the server before the task
# carrying the answer leaves that queue (10 s after the answer). That both land in one task
# is checked below; that the query's replay already held the answer is what makes the
# test fail without task_time.py (it did, every time, on the shared 2-core machine).
RELEASE_AFTER = 5.0
E = EventType


async def test_a_decision_after_a_query_replay_keeps_the_history_replayable(
        client: Client, task_queue: str, db_path: Path, trust: Path, tmp_path: Path) -> None:
    answer = asyncio.Event()  # the attestation waits for it
    attester = Trust(trust)

    @activity.defn(name="tower_attest")
    async def attest_when_told(request: AttestRequest) -> str:
        await answer.wait()
        return attester.tower_attest(request)

    # Activities here (the attestation held); workflows in a worker process, then here.
    settings = WorkerSettings(models=ModelSettings(), streams=db_path.with_name("streams.sqlite"),
                              messages=db_path.with_name("messages.sqlite"))
    tower_own, _ = tower_activities(settings, scripts_of(AGENTS.values()))
    own = [a for a in [*activities(list(AGENTS.values()), db_path=db_path), *tower_own]
           if a.__name__ != "tower_attest"]
    ToolsDb(db_path)
    with sqlite3.connect(db_path) as db:
        db.execute("INSERT INTO invoices VALUES ('INV-7001', 'ACC-1001', 400000, 'paid', "
                   "'2026-11-20')")
    first = WorkerProcess(client.service_client.config.target_host, task_queue, db_path, "",
                          tmp_path / "worker.log", argv=("tests/workflow_worker.py",))
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TOWER_MODELS"):
        first.env.pop(name, None)
    first.start()
    try:
        async with Worker(client, task_queue=task_queue, activities=[*own, attest_when_told],
                          activity_executor=concurrent.futures.ThreadPoolExecutor(4),
                          plugins=[TowerPlugin()]):
            run = f"replay-order-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(
                RefundAgent.run, refund_request(client, run, limit_cents=50_000,
                                                message="Please refund $900 on invoice INV-7001"),
                id=run, task_queue=task_queue)
            await attestation_running(handle)
            first.kill9()  # the worker that has the run cached is gone; its sticky queue stays
            async with build_worker(client, task_queue=task_queue, db_path=db_path,
                                    models=ModelSettings(), no_remote_activities=True):
                query = asyncio.create_task(handle.query("approvals", result_type=dict))
                await asyncio.sleep(RELEASE_AFTER)
                answer.set()
                # This worker's replay for the query is ahead of the task that will carry
                # the attestation: it fails that query (and drops the run), so no command is
                # ever made outside a task; a client asks again.
                with pytest.raises(WorkflowQueryFailedError, match="no workflow task has"):
                    await query
                info = await asked_again(handle)
                outcome = await handle.execute_update(
                    "decide", decision(client, run, info["pending"]), result_type=dict)
                assert outcome["result"] == "approved", outcome
                await handle.result()
                history = await handle.fetch_history()
    finally:
        first.stop()

    # The history replays: the gate's commands were made in the task that took the
    # attestation, in the order a replay makes them.
    task = taking(history, "tower_attest")
    assert E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED in task, task
    [result] = await replay([(run, history)], workflows=list(AGENTS.values()))
    assert result.failure is None, result.failure
    # The decision took effect once: the run paid what was approved.
    assert refunds(db_path) == [("INV-7001", 90_000)]


async def asked_again(handle: Any) -> dict[str, Any]:
    async with asyncio.timeout(120):
        while True:
            try:
                answer: dict[str, Any] = await handle.query("approvals", result_type=dict)
                return answer
            except WorkflowQueryFailedError:
                await asyncio.sleep(0.5)


async def attestation_running(handle: Any) -> None:
    async with asyncio.timeout(120):
        while True:
            pending = (await handle.describe()).raw_description.pending_activities
            if any(p.activity_type.name == "tower_attest" for p in pending):
                return
            await asyncio.sleep(0.2)


def taking(history: WorkflowHistory, activity_name: str) -> list[int]:
    """The command events of the workflow task that took ``activity_name``'s result."""
    scheduled = {e.event_id for e in history.events
                 if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                 and e.activity_task_scheduled_event_attributes.activity_type.name
                 == activity_name}
    done = next(e.event_id for e in history.events
                if e.event_type == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and e.activity_task_completed_event_attributes.scheduled_event_id in scheduled)
    completed = next(e.event_id for e in history.events
                     if e.event_id > done and e.event_type == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    events: list[int] = []
    for e in history.events:
        if e.event_id <= completed:
            continue
        if e.event_type in (E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
                            E.EVENT_TYPE_ACTIVITY_TASK_STARTED):
            break
        events.append(e.event_type)
    return events
