"""A run's live stream on the real dev server: the model's text and each step, read with
``tower.client.stream``, resumed after a disconnect without a gap or a repeat, and a
history that is the same with streaming on or off."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from chatkit import say
from conftest import WorkerFactory
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory

from bench.measure import history_bytes
from tower.activities.model import ModelSettings
from tower.activities.streams import open_streams
from tower.client import stream
from tower.contract.stream import (
    DELTA,
    MODEL_FINISHED,
    MODEL_STARTED,
    RUN_END,
    TOOL_FINISHED,
    TOOL_STARTED,
    TRANSITION,
    Reply,
    StreamEvent,
)
from tower.temporal._stream_sink import stop_publishing
from workflows.account import AccountAgent, AccountRequest
from workflows.chat import ChatAgent, ChatInput

pytestmark = pytest.mark.long

# A realistic pace (~50 tokens/s) so the client reads while the model is still talking.
PACED = ModelSettings(scripted_tokens_per_second=50)


def store_of(db_path: Path):  # the worker's own (worker.streams_for)
    return open_streams(db_path.with_name("streams.sqlite"))


async def read_all(client: Client, run: str, db_path: Path, after: int = 0,
                   deltas: int | None = None) -> list[StreamEvent]:
    """The run's events after ``after``; with ``deltas``, only until that many came."""
    out: list[StreamEvent] = []
    async for event in stream(client, run, after=after, store=store_of(db_path),
                              poll_seconds=0.02):
        out.append(event)
        if deltas is not None and sum(e.kind == DELTA for e in out) >= deltas:
            break  # the client goes away mid-reply
    return out


async def test_a_reader_that_resumes_from_its_offset_gets_every_event_once_in_order(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(models=PACED):
        handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                             id=f"chat-{uuid.uuid4().hex[:8]}",
                                             task_queue=task_queue)

        async def talk() -> str:
            said = await say(client, handle, "what is my status? ACC-1001")
            await handle.execute_update(ChatAgent.close)
            return said.reply

        talking = asyncio.create_task(talk())
        first = await read_all(client, handle.id, db_path, deltas=3)  # then it goes away
        assert not talking.done()  # mid-reply
        rest = await read_all(client, handle.id, db_path, after=first[-1].offset)
        everything = await read_all(client, handle.id, db_path)
        said = await talking
    assert first + rest == everything  # every delta and event once, in order
    assert [e.offset for e in everything] == list(range(1, len(everything) + 1))
    assert everything[-1].kind == RUN_END and everything[-1].data["status"] == "DONE"
    reply = Reply()
    for event in everything:
        reply.take(event)
    assert reply.text == said and said


async def test_steps_tool_calls_and_the_end_are_on_the_stream(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    run = f"account-{uuid.uuid4().hex[:8]}"
    async with scripted_worker():
        handle = await client.start_workflow(AccountAgent.run, AccountRequest(
            question="Check my account ACC-1001"), id=run, task_queue=task_queue)
        everything = await read_all(client, run, db_path)
        await handle.result()
        log = await handle.query(AccountAgent.query_transitions)
    kinds = [e.kind for e in everything]
    assert kinds[-1] == RUN_END and kinds.count(RUN_END) == 1
    assert {TRANSITION, TOOL_STARTED, TOOL_FINISHED, MODEL_STARTED, MODEL_FINISHED} <= set(kinds)
    moves = [(e.data["source"], e.data["target"]) for e in everything if e.kind == TRANSITION]
    assert moves == [(t.source, t.target) for t in log]
    tools = [(e.kind, e.data["tool"]) for e in everything if e.kind in (TOOL_STARTED,
                                                                       TOOL_FINISHED)]
    assert tools == [(TOOL_STARTED, "lookup_account"), (TOOL_FINISHED, "lookup_account")]
    # Structured output is not streamed as text: it comes whole when the call finishes.
    finished = [e for e in everything if e.kind == MODEL_FINISHED]
    assert finished and all("content" in e.data or "tool_calls" in e.data for e in finished)
    assert DELTA not in kinds


async def first_task_done(handle: WorkflowHandle[Any, Any]) -> bool:
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return True
    return False


async def chat_turn(client: Client, task_queue: str, text: str) -> WorkflowHistory:
    handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                         id=f"chat-{uuid.uuid4().hex[:8]}",
                                         task_queue=task_queue)
    # The message after the run's first task, every time: sent sooner, it may share that
    # task or not (on a busy machine), and the history has a task's three events more or
    # fewer — a difference of timing, not of streaming.
    async with asyncio.timeout(60):
        while not await first_task_done(handle):
            await asyncio.sleep(0.05)
    await say(client, handle, text)
    await handle.execute_update(ChatAgent.close)
    await handle.result()
    return await handle.fetch_history()


async def test_the_history_is_the_same_with_streaming_on_or_off(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        on = await chat_turn(client, task_queue, "what is my status? ACC-1001")
    published = store_of(db_path).read(f"{client.namespace}/{on.workflow_id}")
    assert any(e.kind == DELTA for e in published) and published[-1].kind == RUN_END
    async with scripted_worker(models=ModelSettings(stream=False)):
        stop_publishing(client.namespace, task_queue)  # and no step events either
        off = await chat_turn(client, task_queue, "what is my status? ACC-1001")
    assert store_of(db_path).read(f"{client.namespace}/{off.workflow_id}") == []
    assert len(on.events) == len(off.events)
    assert [e.event_type for e in on.events] == [e.event_type for e in off.events]
    assert history_bytes(on) <= 1.10 * history_bytes(off)


async def test_the_streaming_benchmark_measures_on_a_short_thread(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    from bench import workflow_streams
    from bench.report import _streaming_rows
    from bench.streaming import side_by_side

    figures = await side_by_side(client, task_queue, tmp_path, turns=2)
    alternative = await workflow_streams.side_by_side(client, task_queue, turns=2)
    assert figures["turns"] == 2 and figures["reply_chars"] == 400
    assert figures["first_token_ms"] > 0 and figures["whole_reply_ms"] > 0
    # Not a timing claim: the history's bytes and events are the same, on or off.
    assert figures["events_per_turn"]["on"] == figures["events_per_turn"]["off"]
    assert figures["bytes_per_turn"]["on"] <= 1.10 * figures["bytes_per_turn"]["off"]
    assert figures["stream_events_per_turn"] > 100  # a delta per word, and the steps
    # The alternative keeps every batch in the history: it grows with the reply.
    assert alternative["bytes_per_turn"]["on"] > 2 * alternative["bytes_per_turn"]["off"]
    assert alternative["events_per_turn"]["on"] > alternative["events_per_turn"]["off"]
    rows: list = []
    _streaming_rows(figures, lambda *row: rows.append(row), rows, alternative)
    assert len(rows) == 8
