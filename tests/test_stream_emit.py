"""A node's own events (``ctx.emit``) and the opt-in per-step update, on the real dev
server: on the run's live stream for ``tower.client.stream``, ``tower run --json`` and
the inbox's SSE endpoint, and never in the run's history."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from pathlib import Path

import pytest
from conftest import WorkerFactory
from emit_agents import AccountUpdates, QuietAccount
from headless import Browser, sync
from inboxkit import PASSWORD, inbox, signed_in
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_cli import address_of
from test_stream import read_all, store_of
from test_stream_cli import streamed_tower
from test_stream_inbox import parse_sse

from tower.contract.stream import CUSTOM, MOVE, TOOL_STARTED, TRANSITION
from workflows.account import AccountAgent, AccountRequest

pytestmark = pytest.mark.long

ASK = AccountRequest(question="Check my account ACC-1001")
PROGRESS = {"label": "progress", "node": "lookup_account",
            "data": {"reading": "lookup_account", "arguments": {"account_id": "ACC-1001"}}}


async def test_a_nodes_events_reach_the_client_and_leave_the_history_as_it_was(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    # No workflow cache: every task replays the run from its start, so an event published
    # during a replay would show twice.
    async with scripted_worker(workflows=[QuietAccount], max_cached_workflows=0):
        loud = await client.start_workflow(AccountAgent.run, ASK, task_queue=task_queue,
                                           id=f"account-{uuid.uuid4().hex[:8]}")
        events = await read_all(client, loud.id, db_path)
        await loud.result()
        quiet = await client.start_workflow(QuietAccount.run, ASK, task_queue=task_queue,
                                            id=f"quiet-{uuid.uuid4().hex[:8]}")
        await quiet.result()
        on, off = await loud.fetch_history(), await quiet.fetch_history()
    custom = [e for e in events if e.kind == CUSTOM]
    assert len(custom) == 1
    body = custom[0].as_json()
    assert body["kind"] == CUSTOM and {k: body[k] for k in PROGRESS} == PROGRESS
    kinds = [e.kind for e in events]
    assert kinds.index(CUSTOM) < kinds.index(TOOL_STARTED)  # emitted before the tool call
    tool = next(e for e in events if e.kind == TOOL_STARTED)
    assert body["step"] == tool.data["step"]  # the step the node ran at, as its tool's
    # Outside the history: the same events, one for one, as the run that emits nothing.
    assert [e.event_type for e in on.events] == [e.event_type for e in off.events]
    quiet_events = store_of(db_path).read(f"{client.namespace}/{quiet.id}")
    assert quiet_events and not any(e.kind == CUSTOM for e in quiet_events)


async def test_a_transition_event_keeps_its_kind_and_says_its_move(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(workflows=[AccountUpdates]):
        plain = await client.start_workflow(AccountAgent.run, ASK, task_queue=task_queue,
                                            id=f"account-{uuid.uuid4().hex[:8]}")
        without = await read_all(client, plain.id, db_path)
        updates = await client.start_workflow(AccountUpdates.run, ASK, task_queue=task_queue,
                                              id=f"updates-{uuid.uuid4().hex[:8]}")
        with_updates = await read_all(client, updates.id, db_path)
        log = await updates.query(AccountUpdates.query_transitions)
    moves = [e.as_json() for e in without if e.kind == TRANSITION]
    assert moves and all(m["kind"] == TRANSITION for m in moves)
    assert [m[MOVE] for m in moves] == ["node", "route", "node", "route"]
    assert not any("update" in m for m in moves)  # off by default
    streamed = [e.as_json() for e in with_updates if e.kind == TRANSITION]
    recorded = [t.model_dump(mode="json")["update"] for t in log]
    assert [m["update"] for m in streamed] == recorded
    lookup = next(m for m in streamed if m["source"] == "lookup_account")
    assert lookup["update"]["pending_call"] is None
    assert lookup["update"]["messages"][0]["role"] == "tool"
    assert "ACC-1001" in lookup["update"]["messages"][0]["content"]


async def test_tower_run_json_shows_the_nodes_own_events(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        code, out, err = await streamed_tower(
            address_of(env), db_path, "run", "account", "--task-queue", task_queue,
            "--input", json.dumps({"question": "Check my account ACC-1001"}), "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    custom = [e for e in lines if e["event"] == CUSTOM]
    assert len(custom) == 1 and custom[0]["kind"] == CUSTOM
    assert {k: custom[0][k] for k in PROGRESS} == PROGRESS


async def test_plain_tower_run_shows_the_nodes_own_events_as_lines(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker():
        code, out, err = await streamed_tower(
            address_of(env), db_path, "run", "account", "--task-queue", task_queue,
            "--input", json.dumps({"question": "Check my account ACC-1001"}))
    assert code == 0, err
    data = json.dumps(PROGRESS["data"], ensure_ascii=False, sort_keys=True)
    line = f"· lookup_account · progress {data}"
    assert out.splitlines().count(line) == 1, out


async def test_the_sse_endpoint_carries_the_nodes_own_events(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWER_STREAMS", str(db_path.with_name("streams.sqlite")))
    async with scripted_worker(), inbox(client, watchers=frozenset({"auditor"})) as url:
        handle = await client.start_workflow(AccountAgent.run, ASK, task_queue=task_queue,
                                             id=f"account-{uuid.uuid4().hex[:8]}")
        await handle.result()
        web = await signed_in(url, "walt")
        try:
            got = await web.get(f"/api/runs/{handle.id}/stream")
        finally:
            await web.aclose()
    events = parse_sse(got.text)
    custom = [(i, data) for i, kind, data in events if kind == CUSTOM]
    assert len(custom) == 1
    offset, data = custom[0]
    assert offset == data["offset"] and data["kind"] == CUSTOM
    assert {k: data[k] for k in PROGRESS} == PROGRESS
    transitions = [data for _, kind, data in events if kind == TRANSITION]
    assert transitions and all(d["kind"] == TRANSITION and MOVE in d for d in transitions)


@pytest.mark.browser
async def test_the_stream_page_shows_a_nodes_own_events(
    client: Client, task_queue: str, db_path: Path, scripted_worker: WorkerFactory,
    browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWER_STREAMS", str(db_path.with_name("streams.sqlite")))
    b = browser
    async with scripted_worker(), inbox(client, watchers=frozenset({"auditor"})) as url:
        await sync(b.open, f"{url}/login")
        await sync(b.wait_for_text, "Password")
        await sync(b.fill, "input[name=name]", "walt")
        await sync(b.fill, "input[name=password]", PASSWORD)
        await sync(b.click_text, "Sign in")
        await sync(b.wait_for_text, "walt")
        handle = await client.start_workflow(AccountAgent.run, ASK, task_queue=task_queue,
                                             id=f"account-{uuid.uuid4().hex[:8]}")
        await handle.result()
        await sync(b.open, f"{url}/static/stream.html?run={handle.id}")
        await sync(b.wait_for_text, "ended DONE")
        steps = await sync(b.evaluate, "document.getElementById('steps').textContent")
    assert ('lookup_account: progress {"reading":"lookup_account","arguments":'
            '{"account_id":"ACC-1001"}}') in steps


class EveryQueue(dict[object, object]):
    """A sink registry that answers every (namespace, task queue) with one store."""

    def __init__(self, store: object) -> None:
        super().__init__({("any", "any"): store})
        self.store = store

    def get(self, key: object, default: object = None) -> object:
        return self.store


async def test_replaying_a_recorded_run_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tower.activities.streams import open_streams
    from tower.temporal import _stream_sink
    from tower.temporal._stream_sink import publish_steps, stop_publishing
    from tower.testing import assert_replays
    from workflows.registry import AGENTS

    path = tmp_path / "streams.sqlite"
    store = open_streams(path)
    publish_steps("probe", "probe", store)  # the worker's thread that writes the store
    stop_publishing("probe", "probe")
    # Whatever queue the recording ran on, this worker would publish its runs' events.
    monkeypatch.setattr(_stream_sink, "_SINKS", EveryQueue(store))
    recorded = sorted((Path(__file__).parent / "histories").glob("account-*.json"))
    assert recorded
    for history in recorded:
        (result,) = await assert_replays(history, workflows=list(AGENTS.values()))
        assert "lookup_account" in [t.source for t in result.log]  # the node that emits
    await asyncio.sleep(0.5)  # what was queued is written by then
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM stream_events").fetchone() == (0,)
