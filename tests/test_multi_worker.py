"""Several real `python worker.py` processes on one task queue, as `--scale worker=N` runs them:
they share the load, and when one is killed (SIGKILL, no goodbye) the others take over its runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, new_id, refund_request, refunds, wait_pending
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from workflows.account import AccountAgent, AccountRequest
from workflows.refund import RefundAgent

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 3


@pytest.fixture
async def workers(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[dict[str, subprocess.Popen[bytes]]]:
    """WORKERS worker processes sharing one tools database; keyed by Temporal identity."""
    address = env.client.service_client.config.target_host
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEMPORAL_"))}
    environ = {**base, "TEMPORAL_ADDRESS": address, "TOWER_DB": str(tmp_path / "tools.sqlite"),
               "TOWER_MESSAGES": str(tmp_path / "messages.sqlite")}
    procs = []
    for i in range(WORKERS):
        log = (tmp_path / f"worker-{i}.log").open("wb")
        procs.append(subprocess.Popen(
            [sys.executable, "worker.py", "--task-queue", task_queue], cwd=ROOT, env=environ,
            stdout=log, stderr=subprocess.STDOUT))
    try:
        identities = await _pollers(env.client, task_queue, WORKERS)
        by_pid = {int(i.split("@")[0]): i for i in identities}
        yield {by_pid[p.pid]: p for p in procs}
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def test_workers_share_the_load_and_take_over_a_killed_workers_runs(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path,
    workers: dict[str, subprocess.Popen[bytes]],
) -> None:
    client = env.client
    # Load: a burst of runs is spread over the workers polling the queue.
    handles = [await client.start_workflow(
        AccountAgent.run, AccountRequest(question=f"Check my account ACC-100{i % 3 + 1}"),
        id=new_id("load"), task_queue=task_queue) for i in range(12)]
    results = await asyncio.gather(*(h.result() for h in handles))
    assert all(r.status == "DONE" for r in results)
    work = Counter[str]()
    for loaded in handles:  # not ``h``: that name holds refund handles below
        work.update(await _identities(loaded))
    assert set(work) <= set(workers)
    assert len(work) >= 2, f"one worker did everything: {work}"

    # Takeover: refunds over the limit park at their gate, cached on some worker.
    parked = []
    for _ in range(3):
        run = new_id("refund")
        parked.append(await client.start_workflow(
            RefundAgent.run, refund_request(client, run,
                                            message="Please refund $700 on invoice INV-2004"),
            id=run, task_queue=task_queue))
    pending = [await wait_pending(h) for h in parked]
    last = {h.id: (await _identities(h))[-1] for h in parked}
    victim = Counter(last.values()).most_common(1)[0][0]
    workers[victim].send_signal(signal.SIGKILL)
    workers[victim].wait(timeout=10)

    # Decisions arrive after the kill; the victim's runs finish on the survivors.
    for h, info in zip(parked, pending, strict=True):
        out = await asyncio.wait_for(h.execute_update(
            "decide", decision(client, h.id, info["pending"]), result_type=dict), 60)
        assert out["result"] == "approved"
    states = await asyncio.wait_for(asyncio.gather(*(h.result() for h in parked)), 90)
    assert all(s.status == "DONE" and s.refund_id.startswith("rf_") for s in states)
    taken_over = [h for h in parked if last[h.id] == victim]
    assert taken_over
    for h in taken_over:
        who = await _identities(h)
        after = who[max(i for i, w in enumerate(who) if w == victim) + 1:]
        assert after and set(after) <= set(workers) - {victim}, who
    # Every refund happened exactly once, whichever worker ran it.
    assert sorted(refunds(tmp_path / "tools.sqlite")) == [("INV-2004", 70000)] * 3


async def _identities(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Which worker did each workflow task and activity of the run, in history order."""
    out = []
    async for e in handle.fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            out.append(e.workflow_task_completed_event_attributes.identity)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            out.append(e.activity_task_started_event_attributes.identity)
    return out


async def _pollers(client: Client, task_queue: str, count: int, seconds: float = 90) -> set[str]:
    """Wait until ``count`` distinct workers poll the queue for both kinds of task."""
    async with asyncio.timeout(seconds):
        while True:
            kinds = []
            for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                         TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
                r = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
                    namespace=client.namespace, task_queue=TaskQueue(name=task_queue),
                    task_queue_type=kind))
                kinds.append({p.identity for p in r.pollers})
            if len(kinds[0] & kinds[1]) >= count:
                return kinds[0] & kinds[1]
            await asyncio.sleep(0.5)
