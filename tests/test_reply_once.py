"""A chat reply recorded once: the model call's result holds the text, the update returns
its ref, and a client gets the text back — from the message store when it can read it,
else from the run's own history — only if it hashes to the ref. A tampered store row is
never shown; a ref nothing holds is one clear error."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from chatkit import say
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateHandle, WorkflowUpdateStage
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of, tower

from tower.activities.messages import MessageStore
from tower.activities.model import ModelSettings
from tower.client._replies import reply_text, resolved
from tower.client.errors import ReplyMissing
from tower.contract.failures import Code
from tower.contract.wire import MessageRef, ModelReply, ModelRequest
from tower.core.state import Message
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatInput, ChatReply, UserMessage

HOSTILE = "Sure.\x1b[2J\u202eevil\u202c <script>x</script> \u200b 1001-tail"


def _hostile(request: ModelRequest) -> ModelReply:
    return ModelReply(model="loopback", content=HOSTILE)


async def first_turn(client: Client, task_queue: str, text: str
                     ) -> tuple[WorkflowHandle[Any, Any], WorkflowUpdateHandle[Any], ChatReply]:
    """A new thread's first turn, sent raw: the thread, the update, its result as returned."""
    thread = await client.start_workflow(ChatAgent.run, ChatInput(),
                                         id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    sent = await thread.start_update(ChatAgent.send, UserMessage(text=text),
                                     wait_for_stage=WorkflowUpdateStage.COMPLETED)
    raw: ChatReply = await sent.result()
    return thread, sent, raw


async def test_a_reply_is_recorded_once_and_every_client_gets_its_text(
    client: Client, task_queue: str, db_path: Path, scripted_worker: object,
) -> None:
    store = db_path.with_name("messages.sqlite")
    async with scripted_worker():  # type: ignore[operator]
        thread, sent, raw = await first_turn(client, task_queue, "hello 1001-user")
        # As the update returns it: the ref alone, the text is not there a second time.
        assert raw.reply == "" and raw.reply_ref is not None
        assert raw.reply_ref.role == "assistant"
        run = sent.workflow_run_id
        # A client that reads the store (the worker's), and one that cannot (none here):
        # both get the same text, the second from the run's history.
        from_store = await resolved(client, thread.id, run, raw, store=str(store))
        from_history = await resolved(client, thread.id, run, raw,
                                      store=str(db_path.with_name("nowhere.sqlite")))
        assert from_store.reply == from_history.reply and "hello 1001-user" in from_store.reply
        await thread.execute_update(ChatAgent.close)
        await thread.result()
        history = await thread.fetch_history()
    # Payloads raw; the run's result (its final state, the last reply in it) left aside.
    recorded = b"".join(e.SerializeToString() for e in history.events[:-1])
    assert recorded.count(b"hello 1001-user") == 2  # the update's input, the reply's echo
    assert recorded.count(b"I was shown") == 1  # the reply's own words: once
    # Tower's own code patches nothing: a thread's history holds no patch marker.
    patches = [e for e in history.events
               if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
               and e.marker_recorded_event_attributes.marker_name == "core_patch"]
    assert patches == []


async def test_a_tampered_store_row_is_never_shown(
    client: Client, task_queue: str, db_path: Path, scripted_worker: object,
) -> None:
    store = db_path.with_name("messages.sqlite")
    async with scripted_worker():  # type: ignore[operator]
        thread, sent, raw = await first_turn(client, task_queue, "what is my status?")
        assert raw.reply_ref is not None
        true = await reply_text(client, thread.id, sent.workflow_run_id, raw.reply_ref,
                                store=str(store))
        # Whoever can write the shared store rewrites the reply's row.
        with sqlite3.connect(store) as db:
            db.execute("UPDATE messages SET content = ? WHERE ref = ?",
                       ("Approve the refund now.", raw.reply_ref.ref))
        with pytest.raises(ApplicationError) as caught:
            MessageStore(store).get([raw.reply_ref])
        assert caught.value.type == Code.STORE_ENTRY_MISSING
        assert "does not match its digest" in str(caught.value)
        # The client does not show the row: the run's history has the true text.
        again = await reply_text(client, thread.id, sent.workflow_run_id, raw.reply_ref,
                                 store=str(store))
        assert again == true and "Approve" not in again
        # A ref nothing holds (not in the store, not in the run): one clear error.
        forged = MessageRef(ref="0" * 32, role="assistant", chars=len(true))
        with pytest.raises(ReplyMissing, match="neither in the message store"):
            await reply_text(client, thread.id, sent.workflow_run_id, forged,
                             store=str(store))
        await thread.execute_update(ChatAgent.close)


async def test_hostile_reply_text_comes_back_exactly(
    client: Client, task_queue: str, db_path: Path, scripted_worker: object,
) -> None:
    with LoopbackModelServer(replies=_hostile) as server:
        models = ModelSettings(api_key="loopback", base_url=server.base_url,
                               models=["loopback"], stream=False)
        async with scripted_worker(models=models):  # type: ignore[operator]
            thread = await client.start_workflow(ChatAgent.run, ChatInput(),
                                                 id=f"chat-{uuid.uuid4().hex[:8]}",
                                                 task_queue=task_queue)
            reply = await say(client, thread, "hi")
            await thread.execute_update(ChatAgent.close)
    assert reply.reply == HOSTILE  # whole and exact: showing it inert is each surface's job


async def test_tower_chat_prints_a_reply_it_resolved_inert(
    env: WorkflowEnvironment, task_queue: str, scripted_worker: object,
) -> None:
    # The CLI runs in a directory of its own: no message store, the text from the history.
    address = address_of(env)
    with LoopbackModelServer(replies=_hostile) as server:
        models = ModelSettings(api_key="loopback", base_url=server.base_url,
                               models=["loopback"], stream=False)
        async with scripted_worker(models=models):  # type: ignore[operator]
            code, out, err = await tower(address, "chat", "--task-queue", task_queue,
                                         "-m", "hi", "--close")
            assert code == 0, err
            code, raw, err = await tower(address, "chat", "--task-queue", task_queue,
                                         "--json", "-m", "hi", "--close")
            assert code == 0, err
    line = out.splitlines()[1]  # (after "started …")
    assert line.startswith("[turn 1, step ") and "1001-tail" in line
    # Each control, bidi and invisible character as a visible escape, none of them raw.
    assert r"\x1b[2J" in line and "U+202E" in line
    assert not any(c in line for c in ("\x1b", "\u202e", "\u202c", "\u200b"))
    replies = [e for e in map(json.loads, raw.splitlines()) if e["event"] == "reply"]
    assert [e["reply"] for e in replies] == [HOSTILE] and "reply_ref" not in replies[0]


def test_the_store_checks_what_it_reads_against_the_digest(tmp_path: Path) -> None:
    store = MessageStore(tmp_path / "messages.sqlite")
    (ref,) = store.put([Message(role="assistant", content="the true reply")])
    window = store.put_window(None, [ref])
    assert store.get([ref])[0].content == "the true reply"
    with sqlite3.connect(tmp_path / "messages.sqlite") as db:
        db.execute("UPDATE windows SET refs = replace(refs, ?, ?)", (ref.ref, "f" * 32))
    with pytest.raises(ApplicationError, match="does not match its digest") as caught:
        store.get_window(window)
    assert caught.value.type == Code.STORE_ENTRY_MISSING and not caught.value.non_retryable
