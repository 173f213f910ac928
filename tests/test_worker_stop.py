"""`docker stop` sends SIGTERM: a real `python worker.py` with runs in flight drains (its
running model calls finish, nothing is retried), exits 0, and another worker completes
the runs."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

from procs import WorkerProcess
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tower.cli.agents import scripted_reply
from tower.testing.model_server import Fault, LoopbackModelServer
from workflows.order import OrderAgent, OrderRequest

RUNS = 3
TEXT = "2 x WIDGET-1 to 7 Quay St, Dublin, US"


async def _model_call_attempts(handle: WorkflowHandle) -> list[int]:
    history = await handle.fetch_history()
    return [e.activity_task_started_event_attributes.attempt for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]


async def _completed_by(handle: WorkflowHandle) -> set[str]:
    history = await handle.fetch_history()
    return {e.workflow_task_completed_event_attributes.identity for e in history.events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED}


async def test_sigterm_drains_the_worker_and_another_finishes_its_runs(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    address = env.client.service_client.config.target_host
    with LoopbackModelServer(replies=scripted_reply) as model:
        for _ in range(RUNS):  # every run's first model call is in flight at SIGTERM
            model.inject(Fault("slow", seconds=3))
        first = WorkerProcess(address, task_queue, db_path, model.base_url,
                              tmp_path / "first.log").start()
        second = WorkerProcess(address, task_queue, db_path, model.base_url,
                               tmp_path / "second.log")
        try:
            handles = [await env.client.start_workflow(
                OrderAgent.run, OrderRequest(text=TEXT), id=f"order-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue) for _ in range(RUNS)]
            for _ in range(600):  # until every run's slow model call has started
                if len(model.served) >= RUNS:
                    break
                await asyncio.sleep(0.1)
            assert first.proc is not None and len(model.served) == RUNS
            first.proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(first.proc.wait, 30)
            second.start()
            states = await asyncio.wait_for(
                asyncio.gather(*(h.result() for h in handles)), timeout=120)
        finally:
            first.stop()
            second.stop()
    assert code == 0  # drained and exited, not killed (-15)
    assert [s.status for s in states] == ["DONE"] * RUNS
    log = (tmp_path / "first.log").read_text()
    assert "stopping: draining" in log and "worker stopped" in log
    for handle in handles:
        # Each model call answered on the first attempt: the drain let it finish.
        assert set(await _model_call_attempts(handle)) == {1}
        assert len(await _completed_by(handle)) == 2  # both workers worked on it
    assert first.unhandled() == [] and second.unhandled() == []
