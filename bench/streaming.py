"""Streaming, measured side by side in one run on the loopback model (real HTTP, the real
openai SDK): a 400-character reply at ~50 tokens/s, asked in chat turns.

- time to first token at the client (``tower.client.stream`` reading the worker's stream
  store) vs the time to the whole reply without streaming (the update's answer);
- the lag between the model emitting its first token (the loopback server writing it to
  the socket) and the client reading it, p95;
- history bytes and events per chat turn with streaming on vs off.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from bench.measure import history_bytes, turn_costs
from tower.activities.model import ModelSettings
from tower.activities.streams import open_streams
from tower.client import stream
from tower.contract.stream import DELTA, stream_name
from tower.contract.wire import ModelReply, ModelRequest
from tower.temporal._stream_sink import stop_publishing
from tower.testing.model_server import LoopbackModelServer
from worker import build_worker
from workflows.chat import ChatAgent, ChatInput, UserMessage

TOKENS_PER_SECOND = 50.0
# 100 four-character words ("tokens"): a 400-character reply, two seconds at 50 tokens/s.
REPLY = "".join(f"w{i:02d} " for i in range(100))


def _reply(request: ModelRequest) -> ModelReply:
    return ModelReply(model="loopback", content=REPLY)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


async def _first_delta(client: Client, run: str, store_path: Path, after: int) -> float:
    """time.time() at which the client reads the turn's first delta."""
    async for event in stream(client, run, after=after, store=open_streams(store_path),
                              poll_seconds=0.02):
        if event.kind == DELTA:
            return time.time()
    raise AssertionError("the run ended without a delta")


async def _thread(client: Client, tq: str) -> WorkflowHandle[Any, Any]:
    """A thread that has run its first workflow task: both threads' turns then start alike
    (an update that arrives before that task rides in it, one task fewer)."""
    from tower.client._follow import has_begun

    handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                         id=f"bench-stream-{uuid.uuid4().hex[:8]}",
                                         task_queue=tq)
    while not await has_begun(handle):
        await asyncio.sleep(0.05)
    return handle


async def side_by_side(client: Client, tq: str, folder: Path, *, turns: int) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    on_tq, off_tq = f"{tq}-stream-on", f"{tq}-stream-off"
    store_path = folder / "streams.sqlite"
    with LoopbackModelServer(replies=_reply) as paced, LoopbackModelServer(replies=_reply) as whole:
        paced.set_rate(TOKENS_PER_SECOND)  # streamed: a word every 20 ms
        whole.set_delay(len(REPLY.split()) / TOKENS_PER_SECOND)  # unstreamed: all at the end
        on = build_worker(client, task_queue=on_tq, db_path=folder / "tools.sqlite",
                          models=ModelSettings(api_key="loopback", base_url=paced.base_url,
                                               models=["loopback"]))
        off = build_worker(client, task_queue=off_tq, db_path=folder / "off.sqlite",
                           models=ModelSettings(api_key="loopback", base_url=whole.base_url,
                                                models=["loopback"], stream=False))
        stop_publishing(client.namespace, off_tq)  # no step events either
        async with on, off:
            streamed, plain = await _thread(client, on_tq), await _thread(client, off_tq)
            store = open_streams(store_path)
            first_token, whole_reply, lag = [], [], []
            for t in range(turns):
                text = UserMessage(text=f"turn {t}: tell me more")
                after = store.last(stream_name(client.namespace, streamed.id))
                sent = time.time()
                reading = asyncio.create_task(_first_delta(client, streamed.id, store_path,
                                                           after))
                await streamed.execute_update(ChatAgent.send, text)
                seen = await reading
                first_token.append(1000 * (seen - sent))
                lag.append(1000 * (seen - paced.first_token_at[-1]))
                sent = time.perf_counter()
                await plain.execute_update(ChatAgent.send, text)
                whole_reply.append(1000 * (time.perf_counter() - sent))
            for handle in (streamed, plain):
                await handle.execute_update(ChatAgent.close)
                await handle.result()
            histories = {"on": await streamed.fetch_history(), "off": await plain.fetch_history()}
            costs = {k: turn_costs([h]) for k, h in histories.items()}
            published = len(store.read(stream_name(client.namespace, streamed.id), 0, 100_000))
            store.close()
    return {
        "turns": turns, "tokens_per_second": TOKENS_PER_SECOND, "reply_chars": len(REPLY),
        "first_token_ms": statistics.median(first_token),
        "first_token_p95_ms": p95(first_token),
        "whole_reply_ms": statistics.median(whole_reply),
        "lag_p95_ms": p95(lag), "lag_median_ms": statistics.median(lag),
        # Per turn, from its update's acceptance to the next one's (bench.measure): how the
        # thread's first workflow task and the first update happened to meet is not a turn.
        "bytes_per_turn": {k: statistics.median(c.bytes for c in cost)
                           for k, cost in costs.items()},
        "events_per_turn": {k: statistics.median(c.events for c in cost)
                            for k, cost in costs.items()},
        "history_bytes": {k: history_bytes(h) for k, h in histories.items()},
        "stream_events_per_turn": published / turns,
    }


async def _alone(turns: int) -> dict[str, Any]:
    """This suite and bench.workflow_streams, on a dev server of their own
    (`python -m bench.streaming`)."""
    import tempfile

    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    from tower.cli.devserver import temporal_binary
    from tower.contract import search

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), data_converter=pydantic_data_converter,
        search_attributes=search.ALL, dev_server_log_level="error")
    try:
        from bench import workflow_streams

        tq = f"bench-{uuid.uuid4().hex[:6]}"
        return {"streaming": await side_by_side(
                    env.client, tq, Path(tempfile.mkdtemp(prefix="tower-bench-")), turns=turns),
                "workflow_streams": await workflow_streams.side_by_side(env.client, tq,
                                                                        turns=turns)}
    finally:
        await env.shutdown()


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description="the streaming suite of `python -m bench`")
    parser.add_argument("--turns", type=int, default=40)
    print(json.dumps(asyncio.run(_alone(parser.parse_args().turns)), indent=1))
