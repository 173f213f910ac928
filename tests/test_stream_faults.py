"""kill -9 of the worker while a chat reply streams: the reader is told to discard the
partial reply, then reads the retry's reply from the worker that took over; the thread
holds that one reply. Real processes (`python worker.py`), the real dev server, the
loopback model streaming over HTTP, the worker's SQLite stream store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from procs import WorkerProcess
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_faults_process import address_of, until

from tower.activities.messages import MessageStore
from tower.activities.streams import open_streams
from tower.cli.agents import scripted_reply
from tower.client import stream
from tower.contract.stream import DELTA, DISCARD, MODEL_STARTED, Reply, StreamEvent
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatInput, ChatState, UserMessage


async def collect(client: Client, thread: str, store_path: Path, into: list[StreamEvent]) -> None:
    async for event in stream(client, thread, store=open_streams(store_path), poll_seconds=0.02):
        into.append(event)


async def test_a_worker_killed_mid_stream_is_discarded_and_the_retry_streams_the_reply(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    store_path = db_path.with_name("streams.sqlite")  # the workers' default, beside TOWER_DB
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.set_rate(10)  # ten words a second: the reply is still coming when we kill
        first = WorkerProcess(address_of(env), task_queue, db_path, model.base_url, log,
                              models="m").start()
        second = WorkerProcess(address_of(env), task_queue, db_path, model.base_url, log,
                               models="m")
        try:
            client = env.client
            handle = await client.start_workflow(
                ChatAgent.run, ChatInput(), id=f"chat-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue)
            seen: list[StreamEvent] = []
            reader = asyncio.create_task(collect(client, handle.id, store_path, seen))
            sending = asyncio.create_task(handle.execute_update(
                ChatAgent.send, UserMessage(text="what is my status? ACC-1001")))

            async def mid_reply() -> bool:
                return sum(e.kind == DELTA for e in seen) >= 3
            await until(mid_reply, "the reply to start streaming")
            first.kill9()
            assert not sending.done()
            second.start()
            said = await asyncio.wait_for(sending, timeout=120)
            await asyncio.sleep(0.5)  # the reader's next poll
            reader.cancel()
            state = await handle.query(ChatAgent.query_state)
        finally:
            first.stop()
            second.stop()
    # What the reader saw: the killed attempt, its discard, then the retry's whole reply.
    starts = [e.data["attempt"] for e in seen if e.kind == MODEL_STARTED]
    assert len(starts) == 2, [e.kind for e in seen]
    killed, retried = starts
    discards = [e for e in seen if e.kind == DISCARD]
    assert [e.data["attempt"] for e in discards] == [killed]
    kinds_at = {e.offset: e for e in seen}
    assert discards[0].offset < min(o for o, e in kinds_at.items()
                                    if e.kind == MODEL_STARTED and e.data["attempt"] == retried)
    assert any(e.kind == DELTA and e.data["attempt"] == killed for e in seen)
    shown = Reply()
    for event in seen:
        shown.take(event)
    assert shown.text == said.reply and shown.discarded == [killed]
    assert [e.offset for e in seen] == list(range(1, len(seen) + 1))  # none lost, none twice
    # The thread holds one reply: the retry's.
    thread = ChatState.model_validate(state)
    assert thread.turns == 1 and thread.answered == 1 and thread.window is not None
    assert thread.window.messages == 2  # the user's message and one reply
    messages = MessageStore(db_path.with_name("messages.sqlite"))
    _, refs = messages.get_window(thread.window)
    kept = messages.get(refs)
    assert [m.role for m in kept] == ["user", "assistant"] and kept[1].content == said.reply
    assert second.unhandled() == []


pytestmark = pytest.mark.timeout(300)
