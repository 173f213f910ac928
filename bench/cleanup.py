"""Retention's cost: what one cleanup pass (``TowerStoreCleanup``, as the schedule starts
it) takes per closed run, and what it removes, on a worker whose stores hold only this
suite's threads — ``runs`` closed ones and one still open, whose entries must all stay."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.chat import CHAT_START, message
from tower.activities.model import ModelSettings
from tower.temporal.worker import TowerStoreCleanup
from worker import build_worker
from workflows.chat import ChatAgent, ChatInput, UserMessage

TABLES = {"messages.sqlite": ("messages", "windows", "owners"),
          "streams.sqlite": ("stream_events",)}


def _rows(folder: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for file, tables in TABLES.items():
        with sqlite3.connect(folder / file) as db:
            for table in tables:
                counts[table] = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return counts


async def cost(client: Client, tq: str, folder: Path, *, runs: int, turns: int = 3
               ) -> dict[str, Any]:
    """``runs`` threads of ``turns`` turns closed, one left open; two cleanup passes."""
    folder.mkdir(parents=True, exist_ok=True)
    async with build_worker(client, task_queue=tq, db_path=folder / "tools.sqlite",
                            models=ModelSettings()):
        threads = [await client.start_workflow(
            ChatAgent.run, ChatInput(), id=f"bench-clean-{uuid.uuid4().hex[:8]}",
            task_queue=tq, search_attributes=CHAT_START) for _ in range(runs + 1)]
        for handle in threads:  # each thread's own words: no row shared with another
            for t in range(1, turns + 1):
                await handle.execute_update(ChatAgent.send, UserMessage(
                    text=f"{handle.id} {message(t)}"))
        *closed, open_ = threads
        for handle in closed:
            await handle.execute_update(ChatAgent.close)
            await handle.result()
        before = _rows(folder)
        passes = []
        for n in range(2):  # the second pass finds nothing left to remove: idempotent
            start = time.perf_counter()
            removed = await client.execute_workflow(
                TowerStoreCleanup.run, 0.0, id=f"bench-cleanup-{tq}-{n}", task_queue=tq)
            passes.append((time.perf_counter() - start, removed))
        after = _rows(folder)
        # The open thread goes on from its window: nothing it uses went.
        reply = await open_.execute_update(ChatAgent.send, UserMessage(text=message(turns + 1)))
        await open_.execute_update(ChatAgent.close)
    (first, removed), (second, again) = passes
    return {"runs": runs, "turns": turns,
            "ms_per_run": 1000 * first / runs, "second_pass_ms": 1000 * second,
            "runs_removed": removed, "second_pass_removed": again,
            "rows_removed_per_run": {t: (before[t] - after[t]) / runs for t in before},
            "rows_left": after, "open_run_answered": reply.turn == turns + 1}
