"""A deployment upgraded while a run waits at FAILED in the old dead-letter wait: the run
was started and parked by the code before FAILED failed the workflow execution (commit
e9636d6, run as a real `python worker.py` process from that commit's tree); the new
worker takes it over, replays it down the old path, and `tower retry` still sends it
the `retry` update it waits for. An old run whose wait ran out (COMPLETED, Tower state
FAILED) is reset like a failed execution."""

from __future__ import annotations

import asyncio
import io
import shutil
import sqlite3
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
from conftest import WorkerFactory
from procs import REPO, WorkerProcess
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tower.cli.cmd_operator import send_retry
from tower.contract import search
from tower.core.engine import Kind, Transition
from workflows.order import OrderRequest

OLD = "e9636d6"  # "engine as a library": the last code with the dead-letter wait


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None:
        pytest.skip(f"git is not installed: it reads commit {OLD}, the code before the change")
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{OLD}^{{commit}}"],
                           capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {OLD} (the code before the change) is not in this clone's history")
    tree = tmp_path_factory.mktemp("tower-before")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", OLD], capture_output=True,
                             check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


async def test_runs_failed_under_the_old_code_are_retried_after_the_upgrade(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory, old_tree: Path,
) -> None:
    client = env.client
    old = WorkerProcess(client.service_client.config.target_host, task_queue, db_path, "",
                        tmp_path / "old-worker.log", argv=(str(old_tree / "worker.py"),))
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "TOWER_MODELS"):
        old.env.pop(name)  # the offline scripted model
    old.env["PYTHONPATH"] = str(old_tree)
    old.start()
    order = OrderRequest(text="4 x GIZMO-3 to 9 High St, Leeds, GB")
    parked, closed = (f"order-{uuid.uuid4().hex[:8]}" for _ in range(2))
    try:
        handle = await client.start_workflow("order", order, id=parked, task_queue=task_queue)
        # An old run whose wait was 0: it completed, with Tower's state FAILED.
        gone = await client.start_workflow("order", order, id=closed, task_queue=task_queue,
                                           memo={"tower_failed_wait_seconds": 0})
        assert (await gone.result())["status"] == "FAILED"
        async with asyncio.timeout(90):
            while (await handle.describe()).typed_search_attributes.get(
                    search.AGENT_STATUS) != "FAILED":
                await asyncio.sleep(0.2)
    finally:
        old.kill9()  # the old deployment goes away (SIGKILL: no drain needed, it is parked)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING  # parked
    assert (await gone.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert old.unhandled() == []

    with sqlite3.connect(db_path) as db:
        db.execute("UPDATE products SET stock = 10 WHERE sku='GIZMO-3'")
    async with scripted_worker():  # the new code takes the parked run over
        answer = await send_retry(client, parked, "check_stock", "ops")
        final = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
        # The closed one is reset like a failed execution; the new run is the new code's.
        reset = await send_retry(client, closed, "check_stock", "ops")
        again = await client.get_workflow_handle(closed).result()
    assert answer == f"{parked} will retry from check_stock"
    assert final["status"] == "DONE"
    retry = next(t for t in log if t.source == "FAILED")
    assert (retry.target, retry.kind, retry.reason) == ("check_stock", Kind.OPERATOR,
                                                        "retry by ops")
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert "(before it entered check_stock): new run" in reset and again["status"] == "DONE"
