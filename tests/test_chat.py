"""chat end to end on the real dev server: updates, flat history, reduction,
pruning, continue-as-new, close, replay."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from activities.model import ModelSettings
from tower.core.carry import LogSummary
from tower.core.window import WindowPolicy
from worker import build_worker, sandbox_runner
from workflows.chat import (
    MAX_MESSAGE_CHARS,
    ChatAgent,
    ChatConfig,
    ChatInput,
    ChatReply,
    ChatState,
    UserMessage,
)

SCRIPTED = ModelSettings()
SMALL = WindowPolicy(max_messages=6, keep_recent=2, max_tokens=4000, prune_chars=50)


async def _start(client: Client, task_queue: str, config: ChatConfig) -> WorkflowHandle:
    return await client.start_workflow(ChatAgent.run, ChatInput(config=config),
                                       id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)


async def _say(handle: WorkflowHandle, text: str) -> ChatReply:
    return await handle.execute_update(ChatAgent.send, UserMessage(text=text))


async def _model_inputs(handle: WorkflowHandle) -> list[bytes]:
    history = await handle.fetch_history()
    return [e.activity_task_scheduled_event_attributes.input.payloads[0].data
            for e in history.events
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"]


async def test_chat_keeps_content_out_of_the_history_and_bounds_the_context(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig(window=SMALL))
        replies = [await _say(handle, f"message number {i} marker-{i:03d}") for i in range(12)]
        state = await handle.query("state", result_type=dict)
        inputs = await _model_inputs(handle)
        await handle.execute_update(ChatAgent.close)
        final = await handle.result()
    assert [r.turn for r in replies] == list(range(1, 13))
    assert all(f"marker-{i:03d}" in r.reply for i, r in enumerate(replies))
    # The window the model sees stays bounded: never more than max_messages + one turn.
    assert max(r.context_messages for r in replies) <= SMALL.max_messages + 2
    assert state["reductions"] >= 2 and state["summary"] is not None
    assert "message number" not in str(state["context"])  # refs, not content
    # No model call carries an earlier turn's text: only its own new message.
    respond_inputs = [i for i in inputs if b'"node":"respond"' in i]
    assert len(respond_inputs) == 12
    for turn, data in enumerate(respond_inputs):
        assert all(f"marker-{j:03d}".encode() not in data for j in range(turn))
    # ... so the bytes per call do not grow with the thread: the first reduction cycle
    # (turns 1-6) already has the largest call there will ever be.
    assert max(len(d) for d in respond_inputs[6:]) <= max(len(d) for d in respond_inputs[:6])
    assert final.status == "DONE" and final.closed == "closed by the user"
    assert final.turns == 12 and final.messages == []


async def test_bad_messages_are_refused_before_the_history(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig())
        for bad, why in [("   ", "empty"), ("x" * (MAX_MESSAGE_CHARS + 1), "limit")]:
            with pytest.raises(WorkflowUpdateFailedError) as caught:
                await _say(handle, bad)
            assert why in str(caught.value.cause)
        ok = await _say(handle, "hello there")
        await handle.execute_update(ChatAgent.close)
        # Refused by the validator, or by the server once the run has completed.
        with pytest.raises((WorkflowUpdateFailedError, RPCError)):
            await _say(handle, "too late")
        await handle.result()
        history = await handle.fetch_history()
    accepted = [e for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
    assert ok.turn == 1 and len(accepted) == 2  # "hello there" and close; nothing refused
    assert b"x" * 100 not in history.to_json().encode()


async def test_docs_tool_payload_is_pruned_by_the_reduction(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, ChatConfig(window=SMALL))
        reply = await _say(handle, "search docs login error 500")
        for i in range(4):
            await _say(handle, f"thanks {i}")
        state = ChatState.model_validate(await handle.query("state", result_type=dict))
        await handle.execute_update(ChatAgent.close)
        await handle.result()
    assert "Login fails with error 500" in reply.reply
    assert state.reductions >= 1
    tools = [r for r in state.context if r.role == "tool"]
    assert all(r.pruned for r in tools)


async def test_thread_continues_as_new_with_its_state_and_log(
    client: Client, task_queue: str, db_path: Path
) -> None:
    config = ChatConfig(window=SMALL, continue_as_new_after=60)
    async with build_worker(client, task_queue=task_queue, db_path=db_path, models=SCRIPTED):
        handle = await _start(client, task_queue, config)
        first_run = handle.result_run_id
        replies = [await _say(handle, f"turn {i}") for i in range(15)]
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
    replayer = Replayer(workflows=[ChatAgent], data_converter=pydantic_data_converter,
                        workflow_runner=sandbox_runner())
    await replayer.replay_workflow(first_history)
