"""Two worker hosts sharing nothing but the Temporal server (own data directory and HOME
each: tests/storekit.py). A chat turn that lands on the host without the thread's window
fails that workflow task, naming the store and the setting, and never the run: the host
that has it (back) answers it. With the stores shared in PostgreSQL, turns alternate
between the hosts with no failure at all, large payloads included."""

from __future__ import annotations

import asyncio
import signal
import socket
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from chatkit import say
from netns import unavailable
from pgserver import Postgres
from storekit import Host
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from tower.client._replies import reply_text
from tower.temporal.payloads import tower_data_converter
from workflows.chat import ChatAgent, ChatInput

pytestmark = pytest.mark.long


@pytest.fixture
async def hosts(env: WorkflowEnvironment, task_queue: str, tmp_path: Path
                ) -> AsyncIterator[dict[str, Host]]:
    address = env.client.service_client.config.target_host
    made = {name: Host(name, tmp_path, address, task_queue) for name in ("a", "b")}
    try:
        yield made
    finally:
        for host in made.values():
            host.stop()


async def _thread(client: Client, task_queue: str) -> WorkflowHandle[ChatAgent, Any]:
    return await client.start_workflow(ChatAgent.run, ChatInput(),
                                       id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)


async def _attempt_failure(handle: WorkflowHandle[ChatAgent, Any]) -> str:
    """The last failed attempt's message of the run's pending activity ('' if none)."""
    pending = (await handle.describe()).raw_description.pending_activities
    return pending[0].last_failure.message if pending else ""


async def test_a_host_in_a_network_of_its_own_reaches_only_what_its_settings_name(
    client: Client, task_queue: str, hosts: dict[str, Host],
) -> None:
    why = unavailable()
    if why is not None:
        pytest.skip(f"hosts share this machine's network: {why}")
    a = hosts["a"]
    await a.start()
    assert a.network is not None
    temporal = int(a.env["TEMPORAL_ADDRESS"].rsplit(":", 1)[1])
    with socket.socket() as elsewhere:  # a service on this machine the host was not given
        elsewhere.bind(("127.0.0.1", 0))
        elsewhere.listen()
        assert not a.network.reaches(elsewhere.getsockname()[1])
    assert a.network.reaches(temporal)
    thread = await _thread(client, task_queue)
    assert (await say(client, thread, "Hello from a network of its own")).turn == 1
    await thread.execute_update(ChatAgent.close)


async def test_a_turn_on_a_host_without_the_window_waits_for_one_that_has_it(
    client: Client, task_queue: str, hosts: dict[str, Host],
) -> None:
    a, b = hosts["a"], hosts["b"]
    await b.start()
    thread = await _thread(client, task_queue)
    first = await say(client, thread, "Hello from B")
    assert first.turn == 1 and first.reply
    b.stop()
    await a.start()
    turn = asyncio.create_task(say(client, thread, "And now on A?"))
    async with asyncio.timeout(60):
        while not (failed := await _attempt_failure(thread)):
            await asyncio.sleep(0.5)
    # The attempt failed saying which store lacks what, and what to set; the run did not.
    assert f"message store {a.dir / 'messages.sqlite'} has no window" in failed, failed
    assert "TOWER_STORE_URL" in failed
    assert (await thread.describe()).status == WorkflowExecutionStatus.RUNNING
    assert not turn.done()
    # The host that has the window comes back: the turn is answered, once, by the run.
    await b.start()
    second = await asyncio.wait_for(turn, 120)
    assert second.turn == 2 and second.reply
    assert (await thread.describe()).status == WorkflowExecutionStatus.RUNNING
    await thread.execute_update(ChatAgent.close)
    assert (await thread.result()).status == "DONE"


async def test_with_shared_stores_turns_alternate_between_hosts(
    env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path, pg_url: str,
) -> None:
    address = client.service_client.config.target_host
    shared = {"TOWER_STORE_URL": pg_url, "TOWER_PAYLOAD_THRESHOLD": "2000"}
    a, b = (Host(name, tmp_path, address, task_queue, **shared) for name in ("a", "b"))
    # A client of the deployment: its large inputs go to the same payload store.
    config = client.config()
    config["data_converter"] = tower_data_converter(env=shared)
    deployment = Client(**config)
    try:
        await a.start()
        assert "message store: PostgreSQL postgresql://temporal:***@" in a.text()
        assert pg_url.split(":")[2].split("@")[0] not in a.text()  # the password is not
        thread = await _thread(deployment, task_queue)
        replies = []
        for turn in range(1, 4):
            on, off = (a, b) if turn % 2 else (b, a)
            off.stop(signal.SIGKILL if turn == 2 else signal.SIGTERM)
            await on.start()
            # Turn 2's long message, stored by b's side, is read back by a for turn 3.
            text = f"Turn {turn} on host {on.name}. " + ("Long context. " * 200 if turn == 2
                                                         else "")
            # A client of the deployment reads the reply's text from the shared store.
            reply = await asyncio.wait_for(say(deployment, thread, text, store=pg_url), 120)
            assert reply.turn == turn and f"Turn {turn} on host" in reply.reply
            replies.append(reply)
        # ... from the store itself (the ref names no run that exists: no history to read).
        assert replies[-1].reply_ref is not None
        assert await reply_text(client, "no-such-thread", None, replies[-1].reply_ref,
                                store=pg_url) == replies[-1].reply
        history = await thread.fetch_history()
        # Every call succeeded where it ran, locally: no host ever missed what another
        # stored (a miss sends the call to the queue as an activity, recorded).
        assert not [e for e in history.events if e.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)]
        # Turn 2's message went to the shared payload store, not into the history.
        assert b"Long context. Long context." not in history.to_json().encode()
        assert (await thread.describe()).status == WorkflowExecutionStatus.RUNNING
        await thread.execute_update(ChatAgent.close)
        assert (await thread.result()).turns == 3
    finally:
        a.stop()
        b.stop()


async def test_a_store_unreachable_past_a_failed_attempt_fails_no_run(
    client: Client, task_queue: str, tmp_path: Path, pg_server: Postgres, pg_url: str,
) -> None:
    host = Host("a", tmp_path, client.service_client.config.target_host, task_queue,
                TOWER_STORE_URL=pg_url)
    try:
        await host.start()
        thread = await _thread(client, task_queue)
        assert (await say(client, thread, "One")).turn == 1
        pg_server.pause()
        try:
            turn = asyncio.create_task(say(client, thread, "Two"))
            # The store stays down until an attempt's failure shows (a loaded host may still
            # be in the local attempts: their failures show once the call is queued). The
            # cluster tier holds it down for 30 s (tests/test_cluster_outage.py).
            async with asyncio.timeout(120):
                while not (failed := await _attempt_failure(thread)):
                    await asyncio.sleep(1)
            assert not turn.done()
            assert (await thread.describe()).status == WorkflowExecutionStatus.RUNNING
            assert "message store postgresql://temporal:***@" in failed, failed
            assert "is unreachable" in failed
        finally:
            pg_server.resume()
        second = await asyncio.wait_for(turn, 120)  # the store is back: the turn is answered
        assert second.turn == 2 and second.reply
        await thread.execute_update(ChatAgent.close)
        assert (await thread.result()).status == "DONE"
    finally:
        host.stop()
