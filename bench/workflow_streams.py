"""The alternative measured: Temporal's Workflow Streams (``temporalio.contrib.
workflow_streams``, experimental) carrying the same reply — 400 characters at ~50
tokens/s, published from the activity in batches (signals, every 100 ms: an interactive
pace) and read by a subscriber's polling updates. A minimal chat: one update per turn,
one activity per reply; the same workflow with the activity not publishing is the
baseline. Reported beside bench.streaming's side channel (docs/streaming.md)."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamClient
from temporalio.worker import Worker

from bench.measure import history_bytes, turn_costs

BATCH = timedelta(milliseconds=100)
TOKENS_PER_SECOND = 50.0
REPLY_WORDS = [f"w{i:02d} " for i in range(100)]  # 400 characters, as bench.streaming's


@activity.defn(name="ws_reply")
async def ws_reply(publish: bool) -> str:
    """The model at 50 tokens/s; each word published to the run's stream when asked."""
    if not publish:
        await asyncio.sleep(len(REPLY_WORDS) / TOKENS_PER_SECOND)
        return "".join(REPLY_WORDS)
    async with WorkflowStreamClient.from_within_activity(batch_interval=BATCH) as out:
        words = out.topic("delta")
        for word in REPLY_WORDS:
            await asyncio.sleep(1 / TOKENS_PER_SECOND)
            words.publish(word)
    return "".join(REPLY_WORDS)


@workflow.defn(name="ws_chat")
class WsChat:
    @workflow.init
    def __init__(self, publish: bool) -> None:
        self.stream = WorkflowStream()
        self.publish = publish
        self.closed = False

    @workflow.run
    async def run(self, publish: bool) -> int:
        await workflow.wait_condition(lambda: self.closed and workflow.all_handlers_finished())
        return 0

    @workflow.update(name="send")
    async def send(self, text: str) -> str:
        reply: str = await workflow.execute_activity(
            ws_reply, self.publish, start_to_close_timeout=timedelta(seconds=60))
        return reply

    @workflow.update(name="close")
    def close(self) -> None:
        self.closed = True


async def _first_word(client: Client, run: str, after: int) -> tuple[float, int]:
    reader = WorkflowStreamClient.create(client, run)
    async for item in reader.subscribe("delta", from_offset=after,
                                       poll_cooldown=timedelta(milliseconds=20)):
        return time.time(), item.offset
    raise AssertionError("no item")


async def side_by_side(client: Client, tq: str, *, turns: int) -> dict[str, Any]:
    queue = f"{tq}-workflow-streams"
    async with Worker(client, task_queue=queue, workflows=[WsChat], activities=[ws_reply]):
        handles = {kind: await client.start_workflow(
            WsChat.run, kind == "on", id=f"bench-ws-{kind}-{uuid.uuid4().hex[:8]}",
            task_queue=queue) for kind in ("on", "off")}
        first_token, offset = [], 0
        for t in range(turns):
            sent = time.time()
            reading = asyncio.create_task(_first_word(client, handles["on"].id, offset))
            await handles["on"].execute_update("send", f"turn {t}")
            seen, _ = await reading
            first_token.append(1000 * (seen - sent))
            offset += len(REPLY_WORDS)
            await handles["off"].execute_update("send", f"turn {t}")
        histories = {}
        for kind, handle in handles.items():
            await handle.execute_update(WsChat.close)
            await handle.result()
            histories[kind] = await handle.fetch_history()
    costs = {k: turn_costs([h]) for k, h in histories.items()}
    return {
        "turns": turns, "batch_ms": BATCH.total_seconds() * 1000,
        "first_token_ms": statistics.median(first_token),
        "bytes_per_turn": {k: statistics.median(c.bytes for c in v) for k, v in costs.items()},
        "events_per_turn": {k: statistics.median(c.events for c in v) for k, v in costs.items()},
        "history_bytes": {k: history_bytes(h) for k, h in histories.items()},
    }
