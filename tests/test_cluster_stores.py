"""Two worker hosts sharing nothing on disk (own data directory and HOME each) against the
real Temporal server (two processes on PostgreSQL: tests/clusterkit.py), their stores in
one PostgreSQL database (TOWER_STORE_URL). A 50-turn chat whose turns move between the
hosts, one killed with SIGKILL at every other move: every turn answered once, each model
call served where it ran; messages over the payload threshold written by the client and
read by both hosts and by the CLI; a worker left on local files warns at start-up."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from chatkit import say
from clusterkit import Cluster
from storekit import Host
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tower.temporal.payloads import tower_data_converter
from workflows.chat import ChatAgent, ChatInput

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
TURNS, BLOCK = 50, 5  # turns move to the other host every BLOCK turns


def store_database(cluster: Cluster) -> str:
    """A database of its own on the cluster's PostgreSQL: the stores' one URL."""
    psycopg = pytest.importorskip("psycopg", reason="pip install 'tower[postgres]'")
    name = f"tower_stores_{uuid.uuid4().hex[:8]}"
    base = f"postgresql://temporal:{cluster.pg.password}@127.0.0.1:{cluster.pg.port}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return f"{base}/{name}"


async def test_a_chat_moves_between_hosts_sharing_only_temporal_and_the_stores(
    cluster: Cluster, tmp_path: Path,
) -> None:
    url, queue = store_database(cluster), f"stores-{uuid.uuid4().hex[:6]}"
    shared = {"TOWER_STORE_URL": url, "TOWER_PAYLOAD_THRESHOLD": "2000",
              "TOWER_CODEC_KEYS_FILE": cluster.env["TOWER_CODEC_KEYS_FILE"]}
    hosts = [Host(name, tmp_path, cluster.servers[i].address, queue, **shared)
             for i, name in enumerate(("a", "b"))]
    local = Host("local", tmp_path, cluster.servers[0].address, queue,
                 TOWER_CODEC_KEYS_FILE=shared["TOWER_CODEC_KEYS_FILE"])
    config = (await cluster.client(1)).config()
    config["data_converter"] = tower_data_converter(env=shared)
    client = Client(**config)
    try:
        # On a server that is not the dev server, a store on local files is a warning.
        await local.start()
        local.stop()
        assert "local to this host, but the Temporal server is shared" in local.text()
        thread = await client.start_workflow(ChatAgent.run, ChatInput(), id=f"chat-{queue}",
                                             task_queue=queue)
        for turn in range(1, TURNS + 1):
            block = (turn - 1) // BLOCK
            if (turn - 1) % BLOCK == 0:
                on, off = hosts[block % 2], hosts[(block + 1) % 2]
                off.stop(signal.SIGKILL if block % 2 else signal.SIGTERM)
                await on.start()
            long = "Some context. " * 200 if turn % BLOCK == 3 else ""
            reply = await say(client, thread, f"Turn {turn}. {long}")
            assert reply.turn == turn and reply.reply
        for host in hosts:
            assert "local to this host" not in host.text()
            assert "message store: PostgreSQL postgresql://temporal:***@" in host.text()
        history = await thread.fetch_history()
        events = history.events
        # No call ever missed what another host stored: none left its host for the queue.
        assert not [e for e in events if e.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)]
        accepted = [e for e in events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED]
        assert len(accepted) == TURNS  # every turn once
        assert b"Some context. Some context." not in history.to_json().encode()
        # The CLI, a third host, reads the run's payloads from the same store.
        code, out = await cluster.tower("inspect", thread.id, server=1,
                                        env={**shared, "TOWER_PAYLOAD_DIR": ""})
        assert code == 0, out
        # A CLI without the store says so in one line.
        code, out = await cluster.tower("inspect", thread.id, server=1, env={
            "TOWER_CODEC_KEYS_FILE": shared["TOWER_CODEC_KEYS_FILE"],
            "TOWER_PAYLOAD_DIR": str(tmp_path / "empty")})
        assert code != 0 and "Traceback" not in out and "payload" in out, out
        await thread.execute_update(ChatAgent.close)
        assert (await thread.result()).turns == TURNS
    finally:
        for host in (*hosts, local):
            host.stop()
