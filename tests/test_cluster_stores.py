"""Two worker hosts sharing nothing on disk (own folder with its own copy of the code, data
directory, HOME and copy of the trust directory: tests/storekit.py) against the real
Temporal server (two processes on PostgreSQL: tests/clusterkit.py), their stores in one
PostgreSQL database (TOWER_STORE_URL), the model a loopback OpenAI-compatible server
reached through the `openai` SDK. The test process, with the CLI and the inbox, is the
third host.

- A 50-turn chat whose turns move between the hosts (every 5 turns; the host left is
  stopped, with SIGKILL at every other move). On turn 23 the serving host is killed -9
  while its reply streams (the model holds it after its first word) and restarted: every
  turn is answered once, and the stream, folded as every client folds it, shows each
  turn's reply exactly as the thread returned it, the killed attempt's text dropped.
- Payloads over the threshold: long user messages (written by the client) and long
  replies (written by the host that served the turn) are read by the other host, which
  replays the thread from its history, and by `tower inspect` (the CLI).
- A refund parked at its gate by host A, A killed -9, the request shown in the inbox,
  approved there, and paid by host B: one refund in the tools' database, which is the
  deployment's PostgreSQL (TOWER_DB=postgresql://...), not a file on either host.
- A worker left on local files warns at start-up.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from chatkit import say
from clusterkit import Cluster
from gatekit import wait_pending
from inboxkit import decision_form, inbox, issuer, signed_in
from storekit import Host
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tower.activities.streams import StreamStore, open_streams
from tower.cli.agents import scripted_reply
from tower.client import stream
from tower.client._pending import pending_of
from tower.contract.stream import FINISHED, MODEL_FINISHED, Reply, stream_name
from tower.contract.wire import ModelReply, ModelRequest
from tower.temporal.payloads import tower_data_converter
from tower.testing.model_server import LoopbackModelServer
from workflows.chat import ChatAgent, ChatInput, ChatReply

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
TURNS, BLOCK = 50, 5  # turns move to the other host every BLOCK turns
KILLED = 23  # this turn's host is killed -9 mid-reply, then restarted
THRESHOLD = 2000  # bytes: payloads over it go to the payload store
LONG = "(long)"  # a user message ending so gets a reply over the threshold
TAIL = " Long reply." * 250
EVENTS = (EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
          EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED)


def replies(request: ModelRequest) -> ModelReply:
    """The scripted model's answers; a chat reply to a message ending in LONG gets TAIL."""
    reply: ModelReply = scripted_reply(request)
    users = [m.content for m in request.messages if m.role == "user"]
    if request.node == "respond" and users and users[-1].endswith(LONG) and reply.content:
        return reply.model_copy(update={"content": reply.content + TAIL})
    return reply


@pytest.fixture(scope="module")
def store_url(cluster: Cluster) -> str:
    """The stores' one URL."""
    return cluster.database("tower_stores")


def tools_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as db:
        return [tuple(r) for r in db.execute(sql).fetchall()]


@pytest.fixture(scope="module")
def model() -> Iterator[LoopbackModelServer]:
    with LoopbackModelServer(replies=replies) as server:
        yield server


def settings(cluster: Cluster, store_url: str, model: LoopbackModelServer | None = None
             ) -> dict[str, str]:
    """What every host of the deployment is given: the stores, the codec keys (and, for a
    worker, the model)."""
    shared = {"TOWER_STORE_URL": store_url, "TOWER_PAYLOAD_THRESHOLD": str(THRESHOLD),
              "TOWER_CODEC_KEYS_FILE": cluster.env["TOWER_CODEC_KEYS_FILE"]}
    if model is not None:
        shared.update({"OPENAI_API_KEY": "loopback", "OPENAI_BASE_URL": model.base_url,
                       "TOWER_MODELS": "primary", "TOWER_MODEL_TIMEOUT": "60"})
    return shared


async def deployment_client(cluster: Cluster, store_url: str) -> Client:
    """The third host's client: through the other server process, on the same stores."""
    config = (await cluster.client(1)).config()
    config["data_converter"] = tower_data_converter(env=settings(cluster, store_url))
    return Client(**config)


def identity(host: Host) -> str:
    """The worker identity of the host's current process (the SDK's default)."""
    assert host.proc is not None
    return f"{host.proc.pid}@{socket.gethostname()}"


async def turn_killed_mid_reply(thread: WorkflowHandle[Any, Any], client: Client,
                                store: StreamStore, host: Host, model: LoopbackModelServer,
                                text: str, messages: str) -> tuple[ChatReply, Reply, str]:
    """Send ``text``; once the reply's first word is in the stream, kill -9 ``host`` and
    restart it. The reply, the stream's fold (tower.client.stream) and the text shown
    before the kill."""
    after = store.last(stream_name(client.namespace, thread.id))
    held = model.hold()  # the reply stops after its first word until released
    shown = Reply()

    async def read() -> None:
        async for event in stream(client, thread.id, after=after, store=store):
            if shown.take(event) and shown.state == FINISHED:
                return

    reader = asyncio.create_task(read())
    update = asyncio.create_task(say(client, thread, text, store=messages))
    try:
        async with asyncio.timeout(120):
            while not shown.text:
                assert not update.done(), update
                await asyncio.sleep(0.05)
        partial = shown.text
        killed = identity(host)
        host.stop(signal.SIGKILL)
        assert host.proc is not None and host.proc.returncode == -signal.SIGKILL
        await host.start()
        assert identity(host) != killed
        held.set()
        reply = await asyncio.wait_for(update, 240)
        await asyncio.wait_for(reader, 60)
    finally:
        held.set()
        for task in (reader, update):
            task.cancel()
    return reply, shown, partial


def folded_replies(store: StreamStore, name: str) -> list[str]:
    """Each finished text reply in the stream, in order, folded as clients fold it."""
    shown, texts, after = Reply(), [], 0
    while events := store.read(name, after):
        for event in events:
            after = event.offset
            if shown.take(event) and event.kind == MODEL_FINISHED \
                    and not event.data.get("tool_calls"):
                texts.append(shown.text)
    return texts


async def test_a_chat_moves_between_hosts_sharing_only_temporal_and_the_stores(
    cluster: Cluster, tmp_path: Path, store_url: str, model: LoopbackModelServer,
) -> None:
    queue = f"stores-{uuid.uuid4().hex[:6]}"
    shared = settings(cluster, store_url, model)
    hosts = [Host(name, tmp_path, cluster.servers[i].address, queue, **shared)
             for i, name in enumerate(("a", "b"))]
    local = Host("local", tmp_path, cluster.servers[0].address, queue,
                 TOWER_CODEC_KEYS_FILE=shared["TOWER_CODEC_KEYS_FILE"])
    client = await deployment_client(cluster, store_url)
    store = open_streams(store_url)
    served: dict[int, str] = {}  # turn -> the identity of the process that answered it
    ready: asyncio.Task[Host] | None = None
    answers: list[str] = []
    try:
        # On a server that is not the dev server, a store on local files is a warning.
        await local.start()
        local.stop()
        assert "local to this host, but the Temporal server is shared" in local.text()
        assert (f"the tools' database {local.env['TOWER_DB']} is a file of this host's own, "
                "but the Temporal server is shared") in local.text()
        thread = await client.start_workflow(ChatAgent.run, ChatInput(), id=f"chat-{queue}",
                                             task_queue=queue)
        for turn in range(1, TURNS + 1):
            block = (turn - 1) // BLOCK
            on, off = hosts[block % 2], hosts[(block + 1) % 2]
            if (turn - 1) % BLOCK == 0:
                await (ready or on.start())
                off.stop(signal.SIGKILL if block % 2 else signal.SIGTERM)
                # The next block's host starts while this block's turns run (the thread
                # stays on this host's sticky queue until it stops); after the kill, if any.
                ready = None if block == (KILLED - 1) // BLOCK else \
                    asyncio.create_task(off.start())
            # Every 5th turn from the 3rd: a message (client-written) and a reply
            # (host-written) over the threshold.
            text = f"Turn {turn}. " + ("Some context. " * 200 + LONG if turn % BLOCK == 3
                                       else "")
            if turn == KILLED:
                reply, shown, partial = await turn_killed_mid_reply(
                    thread, client, store, on, model, text, store_url)
                # Mid-reply: its first word was streamed, then dropped with its attempt;
                # the stream shows the reply the thread returned, whole, once.
                assert partial and reply.reply.startswith(partial), (partial, reply.reply)
                assert len(shown.discarded) == 1 and shown.text == reply.reply
                asked = [s for s in model.served if s.last_message.startswith(f"Turn {turn}.")]
                assert len(asked) == 2, asked  # the killed attempt, and the one that answered
                ready = asyncio.create_task(off.start())
            else:
                reply = await say(client, thread, text, store=store_url)
            assert reply.turn == turn, (turn, reply)
            assert reply.reply.startswith(f"You said \u201cTurn {turn}. "), reply.reply
            assert reply.reply.endswith(TAIL) == (turn % BLOCK == 3)
            answers.append(reply.reply)
            served[turn] = identity(on)
        for host in hosts:
            assert "local to this host" not in host.text()
            assert "message store: PostgreSQL postgresql://temporal:***@" in host.text()
        history = await thread.fetch_history()
        events = history.events
        # No call ever missed what another host stored: none left its host for the queue.
        assert not [e for e in events if e.event_type in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)]
        for kind in EVENTS:  # every turn once
            assert len([e for e in events if e.event_type == kind]) == TURNS
        # The turns' workflow tasks were completed by the hosts' processes, on both hosts.
        # (Not each by the one a turn was sent to: after the kill, the restarted host and
        # the other one, starting, poll the same queue, and either may take the next task.)
        completed = {e.workflow_task_completed_event_attributes.identity for e in events
                     if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED} - {""}
        ran = {f"{pid}@{socket.gethostname()}" for host in hosts for pid in host.pids}
        assert completed <= ran, (completed, ran)  # (a host started for the next block too)
        for first in (0, 1):  # host a's blocks, then host b's: each completed some
            processes = {p for t, p in served.items() if (t - 1) // BLOCK % 2 == first}
            assert completed & processes, (first, completed, served)
        # Over the threshold: neither the client's messages nor the hosts' replies are in
        # the history (a reference to the payload store is).
        raw = history.to_json().encode()
        assert b"Some context. Some context." not in raw and b"Long reply. Long" not in raw
        # The stream, folded: every turn's reply exactly as the thread returned it.
        assert folded_replies(store, stream_name(client.namespace, thread.id)) == answers
        # The CLI replays the thread, reading every payload either host or the client
        # wrote, and shows the state after the last long turn: its reply, whole.
        cli = {**shared, "TOWER_PAYLOAD_DIR": ""}
        code, out = await cluster.tower("inspect", thread.id, "--json", server=1, env=cli)
        assert code == 0, out
        responds = [t["step"] for t in json.loads(out)["transitions"] if t["source"] == "respond"]
        assert len(responds) == TURNS
        last_long = max(t for t in range(1, TURNS + 1) if t % BLOCK == 3)
        code, out = await cluster.tower("inspect", thread.id, "--json", "--step",
                                        str(responds[last_long - 1]), server=1, env=cli)
        assert code == 0, out
        assert json.loads(out)["state_after_step"]["reply"] == answers[last_long - 1]
        # A CLI without the store says so in one line.
        code, out = await cluster.tower("inspect", thread.id, server=1, env={
            "TOWER_CODEC_KEYS_FILE": shared["TOWER_CODEC_KEYS_FILE"],
            "TOWER_PAYLOAD_DIR": str(tmp_path / "empty")})
        assert code != 0 and "Traceback" not in out and "payload" in out, out
        await thread.execute_update(ChatAgent.close)
        assert (await thread.result()).turns == TURNS
    finally:
        if ready is not None:
            ready.cancel()
        store.close()
        for host in (*hosts, local):
            host.stop()


@pytest.fixture
async def deployment_env(monkeypatch: pytest.MonkeyPatch, cluster: Cluster, store_url: str
                         ) -> AsyncIterator[dict[str, str]]:
    """The third host's environment (the inbox runs in this process): the stores, the
    codec keys and the task queue the deployment serves."""
    queue = f"refund-{uuid.uuid4().hex[:6]}"
    for name, value in {**settings(cluster, store_url), "TOWER_TASK_QUEUES": queue}.items():
        monkeypatch.setenv(name, value)
    yield {"queue": queue}


async def test_a_refund_parked_on_host_a_is_approved_in_the_inbox_and_paid_by_host_b(
    cluster: Cluster, tmp_path: Path, store_url: str, model: LoopbackModelServer,
    deployment_env: dict[str, str],
) -> None:
    queue = deployment_env["queue"]
    client = await deployment_client(cluster, store_url)
    issuer(client)  # the inbox's key, in the roster before the hosts copy it
    # The tools' database is the tenant's system of record, not a host's: a database of
    # its own on the deployment's PostgreSQL, beside the stores' (docs/production.md).
    tools = cluster.database("tower_tools")
    a, b = (Host(name, tmp_path, cluster.servers[i].address, queue, TOWER_DB=tools,
                 **settings(cluster, store_url, model)) for i, name in enumerate(("a", "b")))
    try:
        await a.start()
        run = f"refund-{uuid.uuid4().hex[:6]}"
        ask = json.dumps({"message": "Please refund $1,200 on invoice INV-2004"})
        code, out = await cluster.tower("run", "refund", "--input", ask, "--id", run,
                                        "--task-queue", queue, "--no-follow", server=1,
                                        env={"TOWER_TASK_QUEUES": queue})
        assert code == 0, out
        handle = client.get_workflow_handle(run)
        async with asyncio.timeout(240):
            while (await pending_of(client, run))[1] is None:
                await asyncio.sleep(0.3)
        parked_by = identity(a)
        a.stop(signal.SIGKILL)  # host A is gone while the refund waits
        await b.start()
        await wait_pending(handle, timeout=240)  # B answers the run's queries (the page's digest)
        async with inbox(client) as url:
            alice = await signed_in(url, "alice")
            try:
                page = await alice.get(f"/runs/{run}")
                assert page.status_code == 200 and "$1,200.00" in page.text, page.text[:2000]
                decided = await alice.post(f"/runs/{run}/decide",
                                           data=decision_form(page.text, verdict="approve"))
                assert decided.status_code == 303, decided.text
            finally:
                await alice.aclose()
        assert (await handle.result())["status"] == "DONE"
        # Parked by A's process, paid by B's: one refund in the tools' database.
        started = {e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
                   async for e in handle.fetch_history_events()
                   if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED}
        by = {started[e.activity_task_started_event_attributes.scheduled_event_id]:
              e.activity_task_started_event_attributes.identity
              async for e in handle.fetch_history_events()
              if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED}
        assert by["tower_attest"] == parked_by and by["issue_refund"] == identity(b), by
        paid = await handle.result()
        assert tools_rows(tools, "SELECT id, invoice_id, amount_cents FROM refunds") == [
            (paid["refund_id"], "INV-2004", 120000)]
        assert tools_rows(tools, "SELECT tool FROM tower_effects WHERE result IS NOT NULL"
                          ) == [("issue_refund",)]
        for host in (a, b):  # neither host holds a tools' file; each names the database
            assert not (host.dir / "tools.sqlite").exists()
            assert "tools' database: PostgreSQL postgresql://temporal:***@" in host.text()
            assert "is a file of this host's own" not in host.text()
    finally:
        a.stop()
        b.stop()
