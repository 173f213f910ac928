"""chat end to end on the real dev server: updates, flat history, reduction,
pruning, continue-as-new, close, replay."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from chatkit import say
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError
from temporalio.worker import Replayer

from bench.measure import turn_costs
from tower.activities.messages import MessageStore
from tower.activities.model import ModelSettings
from tower.core.carry import LogSummary
from tower.core.window import WindowPolicy
from tower.temporal import TowerPlugin
from worker import build_worker
from workflows.chat import (
    MAX_MESSAGE_CHARS,
    ChatAgent,
    ChatConfig,
    ChatInput,
    ChatState,
)

SCRIPTED = ModelSettings()
SMALL = WindowPolicy(max_messages=6, keep_recent=2, max_tokens=4000, prune_chars=50)


async def _start(client: Client, task_queue: str, config: ChatConfig) -> WorkflowHandle:
    return await client.start_workflow(ChatAgent.run, ChatInput(config=config),
                                       id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)


def _payloads(message: Message) -> bytes:
    """Every payload's data inside a history event (they are base64 in its JSON)."""
    if isinstance(message, Payload):
        return message.data
    found = b""
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        items = value.values() if is_map else (value if field.is_repeated else [value])
        found += b"".join(_payloads(v) for v in items)
    return found


def _text(i: int) -> str:
    # The scripted model echoes a message's first 50 characters: the tail is the user's alone.
    return f"message number {i} " + "and some padding " * 4 + f"tail-{i:03d}"


async def test_chat_keeps_content_out_of_the_history_and_bounds_the_context(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig(window=SMALL))
        replies = [await say(client, handle, _text(i)) for i in range(12)]
        state = ChatState.model_validate(await handle.query("state", result_type=dict))
        await handle.execute_update(ChatAgent.close)
        final = await handle.result()
        history = await handle.fetch_history()
    assert [r.turn for r in replies] == list(range(1, 13))
    assert all(f"message number {i}" in r.reply for i, r in enumerate(replies))
    # The window the model sees stays bounded: never more than max_messages + one turn.
    assert max(r.context_messages for r in replies) <= SMALL.max_messages + 2
    assert state.reductions >= 2 and state.window is not None  # one ref in the store
    # Each user message is in the history once: in its update, not in the model call.
    recorded = b"".join(_payloads(e) for e in history.events)
    assert [recorded.count(f"tail-{i:03d}".encode()) for i in range(12)] == [1] * 12
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in history.events
                 if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert "call_model" not in scheduled  # local activities: a marker with the result only
    # ... and the bytes a turn adds do not grow with the thread: the first reduction cycle
    # (turns 1-6, the first run's one-off events included) has the largest turn there is
    # (the last turn's cost also holds the close and the run's end), but for a few bytes
    # of wider numbers (steps, token counts).
    costs = [c.bytes for c in turn_costs([history])]
    assert len(costs) == 12 and max(costs[6:-1]) <= max(costs[:6]) + 20
    assert final.status == "DONE" and final.closed == "closed by the user"
    assert final.turns == 12 and final.messages == []


async def test_bad_messages_are_refused_before_the_history(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig())
        for bad, why in [("   ", "empty"), ("x" * (MAX_MESSAGE_CHARS + 1), "limit")]:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await say(client, handle, bad)
            assert why in str(caught.value.cause)
        ok = await say(client, handle, "hello there")
        await handle.execute_update(ChatAgent.close)
        # Refused by the validator, or by the server once the run has completed.
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):
            await say(client, handle, "too late")
        await handle.result()
        history = await handle.fetch_history()
    accepted = [e for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert ok.turn == 1 and len(accepted) == 2  # "hello there" and close; nothing refused
    assert b"x" * 100 not in history.to_json().encode()


async def test_docs_tool_payload_is_pruned_by_the_reduction(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # Keeping 6 of 7 messages keeps the tool's payload (never cut from its question):
    # nothing is old enough to summarise, so the reduction only prunes.
    keep_all = SMALL.model_copy(update={"keep_recent": 6})
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig(window=keep_all))
        reply = await say(client, handle, "search docs login error 500")
        for i in range(2):
            await say(client, handle, f"thanks {i}")
        state = ChatState.model_validate(await handle.query("state", result_type=dict))
        await handle.execute_update(ChatAgent.close)
        await handle.result()
    assert "Login fails with error 500" in reply.reply
    assert state.reductions == 1 and state.window is not None
    summary, kept = MessageStore(db_path.with_name("messages.sqlite")).get_window(state.window)
    assert summary is None and len(kept) == 7
    tools = [r for r in kept if r.role == "tool"]
    assert len(tools) == 1 and tools[0].pruned and tools[0].chars > keep_all.prune_chars


async def test_thread_continues_as_new_with_its_state_and_log(
    client: Client, task_queue: str, db_path: Path
) -> None:
    config = ChatConfig(window=SMALL, continue_as_new_after=60)
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, config)
        first_run = handle.result_run_id
        replies = [await say(client, handle, f"turn {i}") for i in range(15)]
        summary = await handle.query("log_summary", result_type=LogSummary)
        await handle.execute_update(ChatAgent.close)
        final: ChatState = await handle.result()
        first = client.get_workflow_handle(handle.id, run_id=first_run)
        first_history = await first.fetch_history()
    assert [r.turn for r in replies] == list(range(1, 16))
    assert all(f"turn {i}" in r.reply for i, r in enumerate(replies))
    assert first_history.events[-1].event_type == (
        EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
    assert len(first_history.events) < 100
    assert summary.runs >= 2 and final.turns == 15
    # The step count carried over: one step per transition across every run.
    assert summary.last_step == summary.transitions == final.step - 1
    steps = [r.step for r in replies]
    assert steps == sorted(set(steps))
    # Replay from the history alone: the first run's history replays on this code.
    replayer = Replayer(workflows=[ChatAgent], plugins=[TowerPlugin()])
    await replayer.replay_workflow(first_history)
