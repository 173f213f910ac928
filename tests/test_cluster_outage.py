"""The stores unreachable for 30 s on the cluster tier: their PostgreSQL (a server of its own,
tests/pgserver.py) is stopped, its data kept, and started again while runs are in flight on
two worker hosts sharing nothing on disk (tests/storekit.py). No run fails; each resumes
when the store returns; each host says what happened in lines naming the store, not in
tracebacks."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chatkit import say
from clusterkit import Cluster
from gatekit import wait_pending
from pgserver import Postgres
from storekit import Host
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from test_cluster_stores import LONG, TAIL, deployment_client, replies, settings, tools_rows

from tower.activities.streams import open_streams
from tower.contract.stream import DELTA, stream_name
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatInput

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
OUTAGE = 30  # seconds


@pytest.fixture(scope="module")
def stores_pg() -> Iterator[Postgres]:
    pytest.importorskip("psycopg", reason="pip install 'tower[postgres]'")
    server = Postgres().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def model() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=replies) as server:
        yield server


async def status(handle: WorkflowHandle[Any, Any]) -> WorkflowExecutionStatus | None:
    return (await handle.describe()).status


async def test_no_run_fails_while_the_stores_are_unreachable_and_each_resumes(
    cluster: Cluster, tmp_path: Path, stores_pg: Postgres, model: LoopbackModelServer,
) -> None:
    url = f"postgresql://temporal:{stores_pg.password}@127.0.0.1:{stores_pg.port}/postgres"
    queue = f"outage-{uuid.uuid4().hex[:6]}"
    shared = settings(cluster, url, model)
    # The tools' data on the cluster's PostgreSQL, reachable throughout: the stores' go.
    tools = cluster.database("tower_tools")
    hosts = [Host(name, tmp_path, cluster.servers[i].address, queue, **shared, TOWER_DB=tools)
             for i, name in enumerate(("a", "b"))]
    client = await deployment_client(cluster, url)
    store = open_streams(url)
    cli = {**settings(cluster, url), "TOWER_TASK_QUEUES": queue, "TOWER_PAYLOAD_DIR": ""}
    try:
        for host in hosts:
            await host.start()
        threads = [await client.start_workflow(ChatAgent.run, ChatInput(),
                                               id=f"chat-{queue}-{i}", task_queue=queue)
                   for i in range(2)]
        for thread in threads:
            first = await say(client, thread, "Turn 1.", store=url)
            assert first.turn == 1
        refund = f"refund-{queue}"
        ask = json.dumps({"message": "Please refund $1,200 on invoice INV-2004"})
        code, out = await cluster.tower("run", "refund", "--input", ask, "--id", refund,
                                        "--task-queue", queue, "--no-follow", env=cli)
        assert code == 0, out
        parked = client.get_workflow_handle(refund)
        await wait_pending(parked, timeout=240)
        # In flight as the store goes: a long reply streaming (held after its first word).
        name = stream_name(client.namespace, threads[1].id)
        after = store.last(name)
        held = model.hold()
        streaming = asyncio.create_task(say(client, threads[1], f"Turn 2. {LONG}", store=url))
        async with asyncio.timeout(120):
            while not [e for e in store.read(name, after) if e.kind == DELTA]:
                await asyncio.sleep(0.05)
        store.close()
        logged = [len(host.text()) for host in hosts]
        stores_pg.pause()
        try:
            held.set()
            # During the outage: a turn sent, a refund approved, a run started.
            waiting = asyncio.create_task(say(client, threads[0], "Turn 2.", store=url))
            approve = asyncio.create_task(cluster.tower(
                "approve", "--yes", refund, "--by", "alice", "--role", "manager",
                env=cli, timeout=240))
            support = await client.start_workflow(
                "support", {"message": "I was charged twice for invoice INV-2001"},
                id=f"support-{queue}", task_queue=queue)
            await asyncio.sleep(OUTAGE)
            runs = [*threads, parked, support]
            assert not waiting.done() and not streaming.done()
            for handle in runs:
                assert await status(handle) in (WorkflowExecutionStatus.RUNNING,
                                                 WorkflowExecutionStatus.COMPLETED), handle.id
        finally:
            stores_pg.resume()
        second = await asyncio.wait_for(waiting, 180)
        assert second.turn == 2 and second.reply.startswith("You said \u201cTurn 2.")
        long = await asyncio.wait_for(streaming, 180)
        assert long.turn == 2 and long.reply.endswith(TAIL)
        code, out = await asyncio.wait_for(approve, 240)
        assert code == 0, out
        for handle in (parked, support):
            assert (await handle.result())["status"] == "DONE", handle.id
        assert tools_rows(tools, "SELECT invoice_id, amount_cents FROM refunds") == [
            ("INV-2004", 120000)]
        for thread in threads:
            await thread.execute_update(ChatAgent.close)
            assert (await thread.result()).status == "DONE"
        # Each host says what happened in lines that name the store, not in tracebacks.
        said = [host.text(start) for host, start in zip(hosts, logged, strict=True)]
        for text in said:
            assert "Traceback" not in text and stores_pg.password not in text, text[-4000:]
            lines = [line for line in text.splitlines() if "127.0.0.1" in line
                     and "HTTP Request" not in line]
            assert len(lines) <= 30, "\n".join(lines)
        every = "\n".join(said)
        assert "of activity 'call_model' failed: message store postgresql://temporal:***@" \
            in every and "is unreachable" in every, every[-4000:]
        assert "stream store postgresql://temporal:***@" in every
        assert "answers again after" in every
    finally:
        store.close()
        for host in hosts:
            host.stop()
