"""`docker stop` sends SIGTERM: a real `python worker.py` with runs in flight drains (its
running model calls finish, nothing is retried), exits 0, and another worker completes
the runs. Every time: 20 working workers (`python worker.py` and `tower worker`), each with
a run in flight, stopped with SIGTERM: 20 exits 0 (before, 2 drains in 9 ended in `Fatal
Python error: PyGILState_Release ... finalizing`, exit 134: tower/temporal/_process.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from procs import REPO, WorkerProcess
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from towercli import tower_cli

from tower.cli.agents import scripted_reply
from tower.testing.model_server import Fault, LoopbackModelServer
from workflows.order import OrderAgent, OrderRequest

RUNS = 3
TEXT = "2 x WIDGET-1 to 7 Quay St, Dublin, US"
STOPS = 20
AT_ONCE = 5  # workers started and stopped together (2 cores)
ENTRIES = (("worker.py",), ("-m", "tower.cli.cli", "worker"))  # python worker.py, tower worker
STARTED = 2  # PendingActivityState: the activity is running on a worker


async def _activities_started_by(handle: WorkflowHandle, pid: int) -> list[tuple[str, int, bool]]:
    """(activity type, attempt, completed?) of each activity task the worker ``pid`` started."""
    history = await handle.fetch_history()
    scheduled = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    completed = {e.activity_task_completed_event_attributes.scheduled_event_id
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED}
    out = []
    for e in history.events:
        started = e.activity_task_started_event_attributes
        if (e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and started.identity.startswith(f"{pid}@")):
            out.append((scheduled[started.scheduled_event_id], started.attempt,
                        started.scheduled_event_id in completed))
    return out


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
            # (On a loaded host a run's slow call may end, and its next begin, before the
            # last run's slow call starts: more than RUNS requests, which changes nothing.)
            assert first.proc is not None and len(model.served) >= RUNS
            first_pid = first.proc.pid
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
        # The model call in flight at SIGTERM ran once on this worker and completed: the
        # drain let it finish. (Its attempt number may exceed 1 when a loaded host timed an
        # earlier attempt out before SIGTERM; what the second worker ran may retry too.)
        started = await _activities_started_by(handle, first_pid)
        assert [(kind, done) for kind, _, done in started] == [("call_model", True)]
        assert len(await _completed_by(handle)) == 2  # both workers worked on it
    assert first.unhandled() == [] and second.unhandled() == []


async def _said_ready(worker: WorkerProcess) -> None:
    assert worker.proc is not None
    for _ in range(1200):
        if "worker ready" in worker.log_path.read_text(errors="replace"):
            return
        assert worker.proc.poll() is None, worker.log_path.read_text(errors="replace")[-2000:]
        await asyncio.sleep(0.1)
    raise AssertionError(f"the worker never said it was ready; see {worker.log_path}")


async def _activity_running(handle: WorkflowHandle) -> None:
    for _ in range(1200):
        pending = (await handle.describe()).raw_description.pending_activities
        if any(a.state == STARTED for a in pending):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{handle.id}: no activity started")


@pytest.mark.soak  # 20 drains (the figure): the soak tier
async def test_every_sigterm_to_a_working_worker_exits_0(
    env: WorkflowEnvironment, tmp_path: Path,
) -> None:
    address = env.client.service_client.config.target_host
    codes: list[int] = []
    stopped: list[WorkerProcess] = []
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.set_delay(1.0)  # every model call is running for a second
        for batch in range(STOPS // AT_ONCE):
            workers = [WorkerProcess(address, f"stop-{uuid.uuid4().hex[:8]}",
                                     tmp_path / f"tools-{batch}-{i}.sqlite", model.base_url,
                                     tmp_path / f"worker-{batch}-{i}.log",
                                     argv=ENTRIES[i % 2]).start() for i in range(AT_ONCE)]
            handles: list[WorkflowHandle] = []
            try:
                await asyncio.gather(*(_said_ready(w) for w in workers))
                # One run on each worker's own queue. At SIGTERM, half the workers are
                # running its model call; the other half have just been given the run (a
                # stop right after start-up is when the old worker aborted at exit).
                handles = [await env.client.start_workflow(
                    OrderAgent.run, OrderRequest(text=TEXT), id=f"stop-{uuid.uuid4().hex[:8]}",
                    task_queue=w.env["TOWER_TASK_QUEUE"]) for w in workers]
                await asyncio.gather(*(_activity_running(h) for h in handles[::2]))
                for w in workers:
                    assert w.proc is not None
                    w.proc.send_signal(signal.SIGTERM)
                codes += [await asyncio.to_thread(w.proc.wait, 60)  # type: ignore[union-attr]
                          for w in workers]
                stopped += workers
            finally:
                for w in workers:
                    w.stop()
                for h in handles:
                    await h.terminate("the drain test is over")
    assert codes == [0] * STOPS, [(w.argv, c) for w, c in zip(stopped, codes, strict=True)]
    for w in stopped:
        log = w.log_path.read_text(errors="replace")
        assert "stopping: draining" in log and "worker stopped" in log, log[-2000:]
        assert w.unhandled() == []


async def test_tower_worker_runs_the_project_s_worker_main() -> None:
    # `tower worker` in a process of its own, forked from the CLI's fork server (towercli):
    # the command's own start-up is not what this shows, and costs seconds of imports.
    shown = await tower_cli(["worker", "--help"], env=dict(os.environ), cwd=REPO, timeout=120)
    assert shown[0] == 0 and "worker.py" in shown[1], shown[2]
    # ARGS reach worker.py's own parser and main(), as `python worker.py ARGS` would.
    code, _, err = await tower_cli(["worker", "--tenant", "no such/tenant"],
                                   env=dict(os.environ), cwd=REPO, timeout=120)
    assert code == 1
    assert err.strip().splitlines()[-1].startswith("error: invalid tenant name")
