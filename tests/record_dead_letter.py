"""Record runs the way Tower made them before FAILED failed the workflow execution: a
FAILED run waited as a dead letter for the ``retry``/``abort`` update.

Run it against a checkout of that code (commit e9636d6, "engine as a library"):

    git archive e9636d6 | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old .venv/bin/python tests/record_dead_letter.py tests/histories/dead-letter

It writes ``order-retried.json`` (out of stock, parked, restocked, retried by update, DONE)
and ``order-aborted.json`` (parked, then aborted). `tests/test_histories.py` replays them
against the current code, which must take the old path (``tower-failed-is-failure`` patch).
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import tempfile
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tower.activities.model import ModelSettings
from tower.cli.cmd_operator import send_abort, send_retry
from tower.cli.devserver import temporal_binary
from tower.contract import search
from worker import build_worker
from workflows.order import OrderAgent, OrderRequest

QUEUE = "record-dead-letter"
GIZMOS = "4 x GIZMO-3 to 9 High St, Leeds, GB"  # out of stock in a fresh database


async def parked(env: WorkflowEnvironment, run: str) -> None:
    handle = env.client.get_workflow_handle(run)
    for _ in range(300):
        if await handle.query("status", result_type=str) == "FAILED":
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"{run} never reached FAILED")


async def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    db = Path(tempfile.mkdtemp()) / "tools.sqlite"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error")
    try:
        async with build_worker(env.client, task_queue=QUEUE, db_path=db,
                                models=ModelSettings()):
            for run in ("order-retried", "order-aborted"):
                await env.client.start_workflow(OrderAgent.run, OrderRequest(text=GIZMOS),
                                                id=run, task_queue=QUEUE)
                await parked(env, run)
            with sqlite3.connect(db) as conn:
                conn.execute("UPDATE products SET stock = 10 WHERE sku='GIZMO-3'")
            print(await send_retry(env.client, "order-retried", "check_stock", "ops"))
            print(await send_abort(env.client, "order-aborted", "ops", "customer cancelled"))
            for run in ("order-retried", "order-aborted"):
                handle = env.client.get_workflow_handle(run)
                print(run, (await handle.result())["status"])
                (out / f"{run}.json").write_text((await handle.fetch_history()).to_json() + "\n")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/histories/dead-letter")))
