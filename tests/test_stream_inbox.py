"""The inbox's server-sent events on the real dev server with a real worker: a run's
stream over HTTP (resumable by Last-Event-ID, signed in, only for runs the user may
see), and, in headless Chromium, the list updating in place and the minimal stream page
showing a reply as it forms."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from chatkit import say
from conftest import WorkerFactory
from gatekit import make_shop
from headless import Browser, sync
from inboxkit import PASSWORD, inbox, park_refund, signed_in
from temporalio.client import Client, WorkflowHandle

from tower.activities.model import ModelSettings
from tower.cli.live import MODEL_KINDS
from tower.contract.stream import DELTA, RUN_END, Reply, StreamEvent
from workflows.chat import ChatAgent, ChatInput


def parse_sse(text: str) -> list[tuple[int | None, str, dict[str, Any]]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if not line.startswith(":"))
        if "event" in fields:
            out.append((int(fields["id"]) if "id" in fields else None, fields["event"],
                        json.loads(fields["data"])))
    return out


@pytest.fixture
def streams(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's store (beside TOWER_DB), which the inbox reads too."""
    path = db_path.with_name("streams.sqlite")
    monkeypatch.setenv("TOWER_STREAMS", str(path))
    return path


async def chat_thread(client: Client, task_queue: str) -> tuple[str, str]:
    handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                         id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    said = await say(client, handle, "hello there")
    await handle.execute_update(ChatAgent.close)
    await handle.result()
    return handle.id, said.reply


async def reply_as_it_forms(b: Browser, client: Client, handle: WorkflowHandle[Any, Any],
                            text: str) -> tuple[list[str], str]:
    """Send ``text`` to the thread while its open page is read: every text ``#reply``
    showed, and the reply."""
    sending = asyncio.create_task(say(client, handle, text))
    shown: list[str] = []
    while not sending.done() or not shown or shown[-1] != sending.result().reply:
        seen = await sync(b.evaluate, "document.getElementById('reply').textContent")
        if seen and (not shown or seen != shown[-1]):
            shown.append(seen)
        await asyncio.sleep(0.05)
    return shown, sending.result().reply


async def test_a_runs_stream_over_sse_resumes_from_last_event_id(
    client: Client, task_queue: str, streams: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(), inbox(client, watchers=frozenset({"auditor"})) as url:
        run, said = await chat_thread(client, task_queue)
        # A chat has no gate: only a watcher (walt, auditor) may read it; carol may not.
        carol = await signed_in(url, "carol")
        hidden = await carol.get(f"/api/runs/{run}/stream?wait=0")
        await carol.aclose()
        web = await signed_in(url, "walt")
        try:
            whole = await web.get(f"/api/runs/{run}/stream")
            assert whole.headers["content-type"].startswith("text/event-stream")
            events = parse_sse(whole.text)
            middle = events[len(events) // 2][0]
            assert middle is not None
            resumed = await web.get(f"/api/runs/{run}/stream",
                                    headers={"Last-Event-ID": str(middle)})
            bad = await web.get(f"/api/runs/{run}/stream", headers={"Last-Event-ID": "-1 OR 1"})
            missing = await web.get("/api/runs/no-such-run/stream?wait=0")
        finally:
            await web.aclose()
        async with httpx.AsyncClient(base_url=url) as anon:
            refused = await anon.get(f"/api/runs/{run}/stream")
    ids = [e[0] for e in events[:-1]]
    assert ids == list(range(1, len(ids) + 1))
    assert [e[1] for e in events[-2:]] == [RUN_END, "end"]
    reply = Reply()
    for offset, kind, data in events[:-1]:
        assert offset is not None and data["offset"] == offset
        reply.take(StreamEvent(kind, data, offset=offset))
    assert reply.text == said and any(e[1] == DELTA for e in events)
    assert parse_sse(resumed.text) == [e for e in events if e[0] is None or e[0] > middle]
    assert bad.status_code == 400 and "offset" in bad.text
    assert missing.status_code == 404
    assert hidden.status_code == 404 and hidden.text == missing.text.replace("no-such-run", run)
    assert refused.status_code == 303 and "event:" not in refused.text  # sign in first




async def test_a_stream_opened_before_its_run_starts_waits_for_it_and_folds_the_reply(
    client: Client, task_queue: str, streams: Path, scripted_worker: WorkerFactory
) -> None:
    """Opened 5 s before its run starts: no 404, the run's tokens, and beside each model
    event the fold (the whole text so far), so a client that only shows that shows the
    reply once."""
    async with scripted_worker(), inbox(client, watchers=frozenset({"auditor"})) as url:
        run = f"chat-{uuid.uuid4().hex[:8]}"
        web = await signed_in(url, "walt")
        try:
            early = asyncio.create_task(web.get(f"/api/runs/{run}/stream", timeout=120))
            await asyncio.sleep(5)
            assert not early.done()  # waiting, not a 404
            handle = await client.start_workflow(ChatAgent.run, ChatInput(), id=run,
                                                 task_queue=task_queue)
            said = await say(client, handle, "hello there")
            await handle.execute_update(ChatAgent.close)
            await handle.result()
            got = await early
            bad = await web.get(f"/api/runs/{run}/stream?wait=61")
            page = await web.get(f"/runs/{run}")
        finally:
            await web.aclose()
    assert got.status_code == 200 and got.text.startswith("retry: ")
    events = parse_sse(got.text)
    assert any(kind == DELTA for _, kind, _ in events) and events[-1][1] == "end"
    folds = [data["reply"] for _, kind, data in events if kind in MODEL_KINDS]
    assert folds[-1] == {"text": said.reply, "state": "finished",
                         "reason": ""}
    assert bad.status_code == 400 and "wait" in bad.text
    assert f'href="/static/stream.html?run={run}"' in page.text  # the run page links to it


@pytest.mark.browser
async def test_the_list_updates_in_place_and_a_stream_page_shows_tokens_as_they_come(
    client: Client, task_queue: str, db_path: Path, streams: Path,
    scripted_worker: WorkerFactory, browser: Browser
) -> None:
    b = browser
    make_shop(db_path)
    paced = ModelSettings(scripted_tokens_per_second=8)  # slow enough to watch it form
    async with scripted_worker(models=paced), inbox(client,
                                                    watchers=frozenset({"auditor"})) as url:
        first = await park_refund(client, task_queue)
        await sync(b.open, f"{url}/login")
        await sync(b.wait_for_text, "Password")
        await sync(b.fill, "input[name=name]", "alice")
        await sync(b.fill, "input[name=password]", PASSWORD)
        await sync(b.click_text, "Sign in")
        await sync(b.wait_for_text, "Waiting for your decision", first.id)
        await sync(b.evaluate, "window.stillThisPage = 'yes'")
        second = await park_refund(client, task_queue)  # parks while the list is open
        await sync(b.wait_for_text, second.id, first.id, seconds=60)
        assert await sync(b.evaluate, "window.stillThisPage") == "yes"  # no reload

        # The minimal page on the SSE endpoint, while a chat reply forms: a chat has no
        # gate, so a watcher reads it (a manager gets a 404).
        await sync(b.click_text, "Sign out")
        await sync(b.wait_for_text, "Password")
        await sync(b.fill, "input[name=name]", "walt")
        await sync(b.fill, "input[name=password]", PASSWORD)
        await sync(b.click_text, "Sign in")
        await sync(b.wait_for_text, "walt")
        handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                             id=f"chat-{uuid.uuid4().hex[:8]}",
                                             task_queue=task_queue)
        await sync(b.open, f"{url}/static/stream.html?run={handle.id}")
        await sync(b.wait_for_text, "live")
        shown, said = await reply_as_it_forms(b, client, handle, "what is my status? ACC-1001")
        await handle.execute_update(ChatAgent.close)
        await sync(b.wait_for_text, "ended DONE")
    partial = [t for t in shown if t != said]
    assert partial and all(said.startswith(t) for t in partial)  # it grew, word by word
    assert shown[-1] == said
