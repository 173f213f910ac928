"""Several real `python worker.py` processes on one task queue, as `--scale worker=N` runs them:
they share the load, and when one is killed (SIGKILL, no goodbye) the others take over its runs.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, new_id, refund_request, refunds, wait_pending
from procs import worker_pool
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from workflows.account import AccountAgent, AccountRequest
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 3


@pytest.fixture
async def workers(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> AsyncIterator[dict[str, subprocess.Popen[bytes]]]:
    async with worker_pool(env.client.service_client.config.target_host, task_queue, tmp_path,
                           WORKERS) as pool:
        yield pool


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

