"""Retention: the cleanup workflow (run by a Temporal Schedule) removes what a closed run
left in the message and stream stores — on SQLite and PostgreSQL alike — and nothing an
open run uses, even a message both threads share; a second pass removes nothing."""

from __future__ import annotations

import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

from chatkit import say
from conftest import WorkerFactory
from temporalio.client import Client

from tower.activities.messages import MessageStore
from tower.activities.streams import open_streams
from tower.contract.stream import stream_name
from tower.temporal.worker import TowerStoreCleanup, ensure_cleanup, schedule_id
from workflows.chat import ChatAgent, ChatInput


def _owned(db: Path, owner: str) -> tuple[int, int]:
    """(messages, windows) rows that ``owner`` owns, as the store holds them."""
    with sqlite3.connect(db) as con:
        return tuple(con.execute(
            f"SELECT count(*) FROM {table} WHERE ref IN (SELECT ref FROM owners "
            "WHERE owner = ?)", (owner,)).fetchone()[0] for table in ("messages", "windows"))


async def test_a_closed_runs_entries_go_and_an_open_runs_stay(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
) -> None:
    messages_db, tag = db_path.with_name("messages.sqlite"), uuid.uuid4().hex[:8]
    async with scripted_worker():  # it runs the cleanup workflow too
        closed, open_ = [await client.start_workflow(
            ChatAgent.run, ChatInput(), id=f"chat-{name}-{tag}", task_queue=task_queue)
            for name in ("closed", "open")]
        for thread in (closed, open_):  # the same first message: one row, two owners
            await say(client, thread, "Hello there")
        await closed.execute_update(ChatAgent.close)
        await closed.result()
        gone, kept = (stream_name(client.namespace, t.id) for t in (closed, open_))
        store, streams = MessageStore(messages_db), open_streams(db_path.with_name(
            "streams.sqlite"))
        assert {gone, kept} <= set(store.owners(f"{client.namespace}/"))
        assert _owned(messages_db, gone)[0] >= 2 and streams.read(gone)

        removed = await client.execute_workflow(
            TowerStoreCleanup.run, 0.0, id=f"cleanup-{tag}", task_queue=task_queue)
        assert removed["message store"] >= 1 and removed["stream store"] >= 1
        assert gone not in store.owners(f"{client.namespace}/")
        assert streams.read(gone) == [] and streams.read(kept)
        messages, windows = _owned(messages_db, kept)
        assert messages >= 2 and windows >= 1  # the shared message too
        # The open thread goes on from its window, every message of it still there.
        reply = await say(client, open_, "Still here?")
        assert reply.turn == 2 and reply.reply
        # Idempotent: a second pass finds the closed run's entries gone, the open run's kept.
        again = await client.execute_workflow(
            TowerStoreCleanup.run, 0.0, id=f"cleanup-{tag}-2", task_queue=task_queue)
        assert set(again.values()) == {0}
        await open_.execute_update(ChatAgent.close)
        streams.close()
    # The schedule that runs it: the worker (TowerPlugin) made it at start-up, its first
    # pass an interval later; ensuring it again, from any host, is a no-op.
    schedule = client.get_schedule_handle(schedule_id(task_queue))
    described = await schedule.describe()
    assert described.schedule.spec.intervals[0].every == timedelta(hours=1)
    assert not await ensure_cleanup(client, task_queue, every=timedelta(days=1))
    await schedule.delete()
