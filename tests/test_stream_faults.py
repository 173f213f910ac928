"""kill -9 of the worker while a run's model call (an activity on the queue) streams its
reply: the reader is told "retrying" within 5 s and to discard the partial reply, then reads
the reply the other worker's retry streams. Real processes (`python worker.py`), the real
dev server, the loopback model streaming over HTTP, the worker's SQLite stream store. (A
chat's call is a local activity, lost with its workflow task: test_stream_lost_fast, which
also holds the chat thread's one reply after the kill.)"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from procs import WorkerProcess
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_faults_process import address_of, until

from tower.activities.streams import open_streams
from tower.cli.agents import scripted_reply
from tower.client import start_run, stream
from tower.contract.stream import DELTA, DISCARD, RETRYING, Reply, StreamEvent
from tower.testing.model_server import LoopbackModelServer
from workflows.refund import RefundAgent, RefundRequest, RefundState


async def collect(client: Client, thread: str, store_path: Path, into: list[StreamEvent]) -> None:
    async for event in stream(client, thread, store=open_streams(store_path), poll_seconds=0.02):
        into.append(event)


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
    # The killed attempt's discard says "retrying" (on a loaded host another attempt may be
    # timed out and cancelled too: its discard says no retry of its own).
    assert any(e.data["retrying"] is True and "lost" in e.data["reason"]
               for e in seen if e.kind == DISCARD)
    folded = Reply()
    for event in seen:
        folded.take(event)
    reply = RefundState.model_validate(final).reply
    assert reply and folded.text == reply and folded.state == "finished"
    assert [e.offset for e in seen] == list(range(1, len(seen) + 1))


pytestmark = pytest.mark.timeout(300)
