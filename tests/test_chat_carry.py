"""A continued chat thread replays from its histories alone: with a large window and the
external payload store in use, every run of the chain still replays after the store is
deleted, because what a run carries into the next one stays small."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from replaykit import replay
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bench.measure import run_chain
from tower.activities.model import ModelSettings
from tower.core.window import WindowPolicy
from tower.temporal.payloads import tower_data_converter
from worker import build_worker
from workflows.chat import ChatAgent, ChatConfig, ChatInput, UserMessage

THRESHOLD = 8 * 1024  # payloads over this go to the store (the default is 128 KiB)
# A window that is never reduced: 40 turns, 80 messages, all kept.
LARGE = WindowPolicy(max_messages=1000, max_tokens=1_000_000)


async def test_every_run_of_a_continued_chain_replays_with_the_payload_store_deleted(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = tmp_path / "payloads"
    converter = tower_data_converter(store, THRESHOLD, env={})
    client = await Client.connect(env.client.service_client.config.target_host,
                                  data_converter=converter)
    config = ChatConfig(window=LARGE, continue_as_new_after=60)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(
            ChatAgent.run, ChatInput(config=config), id=f"chat-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue)
        for i in range(40):
            reply = await handle.execute_update(
                ChatAgent.send, UserMessage(text=f"turn {i} " + "words to remember " * 20))
        await handle.execute_update(ChatAgent.close)
        final = await handle.result()
        chain = await run_chain(client, handle.id, handle.first_execution_run_id or "")
    assert final.turns == 40 and reply.context_messages == 80  # never reduced
    assert len(chain) >= 3
    carried = [h.events[-1].workflow_execution_continued_as_new_event_attributes.input
               for h in chain[:-1]]
    assert all(h.events[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
               for h in chain[:-1])
    # What each run hands on is a few KB whatever the window: never in the payload store.
    assert max(p.ByteSize() for p in carried) < THRESHOLD

    shutil.rmtree(store, ignore_errors=True)
    monkeypatch.setenv("TOWER_PAYLOAD_DIR", str(store))
    results = await replay([(f"run {i}", h) for i, h in enumerate(chain)])
    assert [(r.source, r.failure, r.problems) for r in results] == [
        (f"run {i}", None, []) for i in range(len(chain))]
    assert all(r.log for r in results)
