"""kill -9 of the worker while a chat reply streams: the reader is told to discard the
partial reply, then reads the retry's reply from the worker that took over; the thread
holds that one reply. Real processes (`python worker.py`), the real dev server, the
loopback model streaming over HTTP, the worker's SQLite stream store."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from chatkit import say
from procs import WorkerProcess
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_faults_process import address_of, until

from tower.activities.messages import MessageStore
from tower.activities.streams import open_streams
from tower.cli.agents import scripted_reply
from tower.client import start_run, stream
from tower.contract.stream import DELTA, DISCARD, MODEL_STARTED, RETRYING, Reply, StreamEvent
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatInput, ChatState
from workflows.refund import RefundAgent, RefundRequest, RefundState


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
            sending = asyncio.create_task(say(client, handle, "what is my status? ACC-1001"))

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
    assert discards[0].data["retrying"] is True and "lost" in discards[0].data["reason"]
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


async def test_a_queued_call_whose_worker_is_killed_says_retrying_within_five_seconds(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    """A run's model call (an activity on the queue) on a worker killed mid-reply: within
    5 s the reader's fold says "retrying" (the short heartbeat noticed the lost worker, the
    call ran again on the other), and the text it ends on is the run's reply, once."""
    store_path = db_path.with_name("streams.sqlite")
    with LoopbackModelServer(replies=scripted_reply) as model:
        model.set_rate(5)
        workers = [WorkerProcess(address_of(env), task_queue, db_path, model.base_url,
                                 tmp_path / f"worker-{n}.log", models="m").start()
                   for n in range(2)]
        try:
            client = env.client
            handle = await start_run(client, RefundAgent, RefundRequest(
                message="Please refund $100 on invoice INV-2004"),
                id=f"refund-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
            seen: list[StreamEvent] = []
            reader = asyncio.create_task(collect(client, handle.id, store_path, seen))

            async def mid_reply() -> bool:
                return sum(e.kind == DELTA for e in seen) >= 3
            await until(mid_reply, "the confirmation to start streaming")
            calls = [a for a in (await handle.describe()).raw_description.pending_activities
                     if a.activity_type.name == "call_model"]
            assert len(calls) == 1, calls
            doomed = next(w for w in workers if w.proc is not None and
                          calls[0].last_worker_identity.startswith(f"{w.proc.pid}@"))
            doomed.kill9()
            killed_at = asyncio.get_running_loop().time()
            shown, read, told = Reply(), 0, None
            while told is None and asyncio.get_running_loop().time() - killed_at < 30:
                for event in seen[read:]:
                    read += 1
                    if shown.take(event) and shown.state == RETRYING:
                        told = asyncio.get_running_loop().time() - killed_at
                await asyncio.sleep(0.05)
            final = await asyncio.wait_for(handle.result(), timeout=120)
            await asyncio.sleep(0.5)  # the reader's last poll
            reader.cancel()
        finally:
            for worker in workers:
                worker.stop()
    assert told is not None and told < 5, f"told after {told} s"
    discard = next(e for e in seen if e.kind == DISCARD)
    assert discard.data["retrying"] is True and "lost" in discard.data["reason"]
    folded = Reply()
    for event in seen:
        folded.take(event)
    reply = RefundState.model_validate(final).reply
    assert reply and folded.text == reply and folded.state == "finished"
    assert [e.offset for e in seen] == list(range(1, len(seen) + 1))


pytestmark = pytest.mark.timeout(300)
