"""The inbox's run page is live (the run's stream, as text), a page opened before its run
starts goes live when it does, and an inbox with no signing key lets people watch and
decides nothing. The real dev server, a real worker, the inbox over HTTP and (browser
tier) headless Chromium."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkerFactory
from gatekit import wait_pending
from headless import Browser, sync
from inboxkit import browser_signed_in, config, csrf_of, inbox, park_refund, signed_in
from temporalio.client import Client
from test_stream_inbox import chat_thread, parse_sse, reply_as_it_forms

from tower.activities.model import ModelSettings
from tower.cli.cmd_inbox import build_config
from tower.cli.errors import CliError
from tower.cli.inbox.app import STOP_GRACE_SECONDS
from tower.cli.inbox.pages import WATCH_ONLY
from tower.contract.stream import DELTA
from workflows.chat import ChatAgent, ChatInput
from workflows.refund import RefundAgent, RefundState


@pytest.fixture
def streams(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The worker's store (beside TOWER_DB), which the inbox reads too."""
    path = db_path.with_name("streams.sqlite")
    monkeypatch.setenv("TOWER_STREAMS", str(path))
    return path


def watch_only(client: Client) -> Any:
    """An inbox with no signing key; walt's role (auditor) watches every run."""
    return dataclasses.replace(config(client, watchers=frozenset({"auditor"})), issuer=None)


async def test_an_inbox_without_a_signing_key_shows_runs_live_and_decides_nothing(
    client: Client, task_queue: str, streams: Path, scripted_worker: WorkerFactory
) -> None:
    async with scripted_worker(), inbox(client, config=watch_only(client)) as url:
        refund = await park_refund(client, task_queue)
        chat, said = await chat_thread(client, task_queue)
        walt, alice, carol = [await signed_in(url, n) for n in ("walt", "alice", "carol")]
        try:
            watched = await walt.get(f"/runs/{chat}")
            stream = await walt.get(f"/api/runs/{chat}/stream")
            page = await alice.get(f"/runs/{refund.id}")
            posted = await alice.post(f"/runs/{refund.id}/decide", data={
                "csrf": csrf_of(page.text), "verdict": "approve", "gate": "refund_review"})
            hidden = await carol.get(f"/runs/{chat}")
            hidden_stream = await carol.get(f"/api/runs/{chat}/stream?wait=0")
        finally:
            for session in (walt, alice, carol):
                await session.aclose()
        state = RefundState.model_validate(await refund.query(RefundAgent.query_state))
        await wait_pending(refund)  # still waiting: nothing was decided
    # Watching: the run page carries the live section, the stream its tokens.
    assert watched.status_code == 200
    assert f'data-stream-run="{chat}"' in watched.text and "/static/stream.js" in watched.text
    events = parse_sse(stream.text)
    assert any(kind == DELTA for _, kind, _ in events) and events[-1][1] == "end"
    assert [d["reply"]["text"] for _, k, d in events if "reply" in d][-1] == said
    # Deciding: the manager is told why there is no form, and a forged post is refused.
    assert page.status_code == 200 and WATCH_ONLY in page.text
    assert 'action="/runs/' not in page.text
    assert posted.status_code == 403 and WATCH_ONLY in posted.text
    assert state.status.value == "AWAITING_APPROVAL"
    # Scope as before: a role that decides nothing here sees neither page nor stream.
    assert hidden.status_code == 404 and hidden_stream.status_code == 404


def test_serving_without_a_key_is_asked_for_and_without_it_the_error_says_how(
    tmp_path: Path
) -> None:
    roles = tmp_path / "roles.json"
    roles.write_text(json.dumps({"walt": ["auditor"]}))
    sign_in: dict[str, Any] = {"proxy_header": "X-User", "trusted_proxies": ("127.0.0.1",),
                               "roles": roles, "watchers": ("auditor",)}
    watching, _ = build_config("default", issuer=None, **sign_in)
    assert watching.issuer is None and watching.watchers == {"auditor"}
    with pytest.raises(CliError, match="--watch-only"):
        build_config("default", issuer=f"no-such-key-{uuid.uuid4().hex[:6]}", **sign_in)


async def shown_forming(b: Browser, client: Client, task_queue: str, run: str
                        ) -> tuple[list[str], str]:
    """Start chat ``run`` and send it a message while the open page is read: every text
    ``#reply`` showed, and the reply."""
    handle = await client.start_workflow(ChatAgent.run, ChatInput(), id=run,
                                         task_queue=task_queue)
    shown, said = await reply_as_it_forms(b, client, handle,
                                          "<b>hi</b> what is my status? ACC-1001")
    await handle.execute_update(ChatAgent.close)
    return shown, said


@pytest.mark.browser
async def test_pages_opened_before_their_run_starts_show_its_tokens_live(
    client: Client, task_queue: str, streams: Path, scripted_worker: WorkerFactory,
    browser: Browser
) -> None:
    """The stream page and the inbox's run page, each opened 5 s before its run starts
    (a watch-only inbox): the run's reply forms on the page word by word, as text."""
    b = browser
    paced = ModelSettings(scripted_tokens_per_second=8)  # slow enough to watch it form
    seen = {}
    async with scripted_worker(models=paced), inbox(client, config=watch_only(client)) as url:
        await browser_signed_in(b, url, "walt")
        for page in ("/static/stream.html?run=", "/runs/"):
            run = f"chat-{uuid.uuid4().hex[:8]}"
            await sync(b.open, f"{url}{page}{run}")
            await sync(b.wait_for_text, "connecting…")
            await asyncio.sleep(5)
            seen[page] = await shown_forming(b, client, task_queue, run)
            await sync(b.wait_for_text, "ended DONE")
            bold = await sync(b.evaluate, "document.querySelectorAll('#reply b').length")
            assert bold == 0  # the model's words are text, never markup
    for page, (shown, said) in seen.items():
        partial = [t for t in shown if t != said]
        assert partial and all(said.startswith(t) for t in partial), page  # word by word
        assert shown[-1] == said, page


pytestmark = pytest.mark.timeout(300)


async def test_an_inbox_stops_promptly_with_a_live_page_open(
    client: Client, task_queue: str, streams: Path, scripted_worker: WorkerFactory
) -> None:
    """A run page left open holds its stream for as long as the run waits (days, at a
    gate): stopping the inbox (Ctrl-C) closes it after a short grace, not never."""
    async with scripted_worker():
        refund = await park_refund(client, task_queue)
        opened = asyncio.Event()

        async def watch(url: str) -> None:
            walt = await signed_in(url, "walt")
            try:
                async with walt.stream("GET", f"/api/runs/{refund.id}/stream",
                                       timeout=None) as response:
                    assert response.status_code == 200
                    opened.set()
                    async for _ in response.aiter_lines():
                        pass
            finally:
                await walt.aclose()

        loop = asyncio.get_running_loop()
        async with inbox(client, watchers=frozenset({"auditor"})) as url:
            watcher = asyncio.create_task(watch(url))
            await asyncio.wait_for(opened.wait(), 30)
            stopping = loop.time()
        took = loop.time() - stopping
        await asyncio.gather(watcher, return_exceptions=True)
        await refund.terminate("test over")
    assert took < STOP_GRACE_SECONDS + 5, took
