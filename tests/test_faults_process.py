"""Fault injection with real processes: a worker killed with SIGKILL mid-model-call and
mid-tool-call and replaced, and the dev server restarted on its SQLite file. Every run ends
DONE, and every side effect happened exactly once (rows counted in the tools' SQLite). The
runs under injected model faults are in test_fault_drill.py; a worker killed while its run
waits at a gate, in test_cli_takeover.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from procs import DevServer, WorkerProcess
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.tools.db import connect
from tower.cli.agents import scripted_reply
from tower.testing.model_server import Fault, LoopbackModelServer
from workflows.order import OrderAgent, OrderRequest, OrderState

pytestmark = pytest.mark.long

TEXT = "2 x WIDGET-1 to 7 Quay St, Dublin, US"


@pytest.fixture
def model_server() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=scripted_reply) as srv:
        yield srv


def address_of(env: WorkflowEnvironment) -> str:
    return env.client.service_client.config.target_host


def count(db_path: Path, sql: str) -> int:
    with sqlite3.connect(db_path) as db:
        return int(db.execute(sql).fetchone()[0])


def assert_effects_once(db_path: Path, runs: int) -> None:
    """One reservation, one charge, one shipment per shipped order, nothing more."""
    assert count(db_path, "SELECT COUNT(*) FROM reservations") == runs
    assert count(db_path, "SELECT COUNT(*) FROM charges") == runs
    assert count(db_path, "SELECT COUNT(*) FROM shipments") == runs
    made = "SELECT COUNT(*) FROM tower_effects WHERE result IS NOT NULL"
    assert count(db_path, made) == 3 * runs
    assert count(db_path, "SELECT stock FROM products WHERE sku='WIDGET-1'") == 5000 - 2 * runs


async def start_order(client: Client, task_queue: str, request: OrderRequest | None = None,
                      ) -> WorkflowHandle[OrderAgent, OrderState]:
    return await client.start_workflow(
        OrderAgent.run, request or OrderRequest(text=TEXT), id=f"order-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue)


@contextmanager
def takeover(env: WorkflowEnvironment, task_queue: str, db_path: Path,
             model_server: LoopbackModelServer, tmp_path: Path,
             ) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:
    """A worker process running and a second one ready to take over from it (one log for
    both); both are stopped on the way out, before the test reads the log."""
    log = tmp_path / "worker.log"
    first = WorkerProcess(address_of(env), task_queue, db_path, model_server.base_url,
                          log).start()
    second = WorkerProcess(address_of(env), task_queue, db_path, model_server.base_url, log)
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def holds_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has the file ``path`` open (Linux: /proc/PID/fd)."""
    target = str(path.resolve())
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # a descriptor closed while we look
            if os.readlink(fd) == target:
                return True
    return False


async def until(predicate, what: str, seconds: float = 60) -> None:
    for _ in range(int(seconds * 10)):
        if await predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def started_attempts(handle: WorkflowHandle, activity: str) -> list[int]:
    history = await handle.fetch_history()
    scheduled = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
    return [e.activity_task_started_event_attributes.attempt for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
            and scheduled[e.activity_task_started_event_attributes.scheduled_event_id]
            == activity]


async def test_worker_killed_during_a_model_call(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    model_server: LoopbackModelServer,
) -> None:
    model_server.inject(Fault("slow", seconds=30))  # parse hangs: the worker dies meanwhile
    with takeover(env, task_queue, db_path, model_server, tmp_path) as (first, second):
        handle = await start_order(env.client, task_queue)

        async def in_flight() -> bool:
            return len(model_server.served) >= 1
        await until(in_flight, "the model call to start")
        first.kill9()
        second.start()
        state = await asyncio.wait_for(handle.result(), timeout=90)
    assert state.status == "DONE"
    parse = [s.outcome for s in model_server.served if s.node == "parse"]
    assert parse == ["slow", "ok"]  # asked again by the new worker, answered once
    # The activity's retry is attempt 2; the history holds only the attempt that finished.
    # (A loaded host may time out one more attempt before the new worker's: never fewer.)
    retried, *rest = await started_attempts(handle, "call_model")
    assert retried >= 2 and rest == [1]
    assert_effects_once(db_path, 1)
    assert second.unhandled() == []


async def test_worker_killed_during_a_side_effecting_tool_call(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    model_server: LoopbackModelServer,
) -> None:
    connect(db_path).close()
    lock = sqlite3.connect(db_path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")  # reserve_stock will block on this write lock
    with takeover(env, task_queue, db_path, model_server, tmp_path) as (first, second):
        handle = await start_order(env.client, task_queue)

        async def reserving() -> bool:
            pending = (await handle.describe()).raw_description.pending_activities
            return any(p.activity_type.name == "reserve_stock"
                       and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                       for p in pending)
        await until(reserving, "reserve_stock to start")

        async def in_the_tool() -> bool:  # a tool opens the database for its call only
            assert first.proc is not None
            return holds_open(first.proc.pid, db_path)
        await until(in_the_tool, "reserve_stock to open the database")
        first.kill9()  # mid-call: inside the tool, waiting to write
        lock.rollback()
        second.start()
        state = await asyncio.wait_for(handle.result(), timeout=90)
    lock.close()
    assert state.status == "DONE"
    assert await started_attempts(handle, "reserve_stock") == [2]
    assert_effects_once(db_path, 1)
    assert second.unhandled() == []


async def test_dev_server_restarted_on_its_sqlite_file_mid_run(
    task_queue: str, db_path: Path, tmp_path: Path, model_server: LoopbackModelServer,
) -> None:
    server = DevServer(tmp_path / "temporal.sqlite", tmp_path / "server.log")
    client = await server.start()
    model_server.set_delay(1.0)  # every model answer takes a second: runs are mid-flight
    worker = WorkerProcess(server.address, task_queue, db_path, model_server.base_url,
                           tmp_path / "worker.log").start()
    try:
        ids = [(await start_order(client, task_queue)).id for _ in range(4)]

        async def some_progress() -> bool:
            return len(model_server.served) >= 2
        await until(some_progress, "runs to get going")
        server.stop()  # returns once the server has exited: the runs are mid-flight
        client = await server.start()
        results = await asyncio.wait_for(asyncio.gather(
            *[client.get_workflow_handle(i, result_type=OrderState).result() for i in ids]),
            timeout=150)
    finally:
        worker.stop()
        server.stop()
    assert [r.status for r in results] == ["DONE"] * 4
    assert_effects_once(db_path, 4)
    assert worker.unhandled() == []
