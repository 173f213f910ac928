"""Who sees which run in the inbox (issue 30, attack 5), on the real dev server with a real
worker: a run is shown only to those whose roles decide its open or past gate, or to a
watcher role the inbox configures; for anyone else every surface of it — its page (with
the conversation), the live-update probe, its stream, a decision post — is the very 404
of a run that does not exist, and nothing changes."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from conftest import WorkerFactory
from gatekit import make_shop, snapshot
from inboxkit import csrf_of, decision_form, inbox, park_migration, park_refund, signed_in
from temporalio.client import Client

from workflows.chat import ChatAgent, ChatInput, UserMessage

pytestmark = pytest.mark.long
NOBODY = "no-such-run-" + uuid.uuid4().hex[:6]


@pytest.fixture
def streams(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = db_path.with_name("streams.sqlite")
    monkeypatch.setenv("TOWER_STREAMS", str(path))
    return path


async def surfaces(web: httpx.AsyncClient, run: str) -> dict[str, httpx.Response]:
    """Every route that shows or acts on one run, as the signed-in user ``web``."""
    csrf = csrf_of((await web.get("/")).text)
    return {
        "page": await web.get(f"/runs/{run}"),
        "changes": await web.get("/api/changes", params={"run": run}),
        "stream": await web.get(f"/api/runs/{run}/stream?wait=0"),
        "decide": await web.post(f"/runs/{run}/decide", data={
            "csrf": csrf, "verdict": "approve", "gate": "refund_review", "request": "3"}),
    }


async def unseen(web: httpx.AsyncClient, run: str) -> None:
    """Every surface of ``run`` answers exactly what a run nobody started gets: 404."""
    got, nothing = await surfaces(web, run), await surfaces(web, NOBODY)
    for name, reply in got.items():
        assert reply.status_code == 404, (name, reply.status_code, reply.text[:500])
        assert reply.text.replace(run, "RUN") == nothing[name].text.replace(NOBODY, "RUN"), name


async def seen(web: httpx.AsyncClient, run: str) -> str:
    """The run's page (200), and its stream opens (the headers; it runs until the run ends)."""
    page = await web.get(f"/runs/{run}")
    assert page.status_code == 200, page.text[:1000]
    async with web.stream("GET", f"/api/runs/{run}/stream") as live:
        assert live.status_code == 200
    return page.text


async def chat_thread(client: Client, task_queue: str) -> str:
    """An ungated run (no gate anyone decides), finished, with a conversation and stream."""
    handle = await client.start_workflow(ChatAgent.run, ChatInput(),
                                         id=f"chat-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
    await handle.execute_update(ChatAgent.send, UserMessage(text="my account ACC-1001"))
    await handle.execute_update(ChatAgent.close)
    await handle.result()
    return handle.id


async def test_a_run_is_shown_only_to_those_whose_roles_decide_its_gates(
    client: Client, task_queue: str, db_path: Path, streams: Path,
    scripted_worker: WorkerFactory,
) -> None:
    make_shop(db_path)
    async with scripted_worker(), inbox(client) as url:
        refund = await park_refund(client, task_queue)
        migration = await park_migration(client, task_queue)
        chat = await chat_thread(client, task_queue)
        before = {h.id: await snapshot(h) for h in (refund, migration)}
        webs = {name: await signed_in(url, name) for name in ("alice", "carol", "dave")}
        alice, carol, dave = webs["alice"], webs["carol"], webs["dave"]
        try:
            # carol's only role (support) decides no gate: she sees nothing at all.
            assert refund.id not in (await carol.get("/")).text
            for run in (refund.id, migration.id, chat):
                await unseen(carol, run)
            # A manager: the refund, not the DBA's migration, nor the ungated thread.
            assert "Awaiting your decision" in await seen(alice, refund.id)
            await unseen(alice, migration.id)
            await unseen(alice, chat)
            assert "Awaiting your decision" in await seen(dave, migration.id)
            await unseen(dave, refund.id)
            # Nothing the refused posts carried reached a run.
            assert {h.id: await snapshot(h) for h in (refund, migration)} == before
            # A past gate: once alice decided it, the run stays hers to see, not carol's.
            page = await alice.get(f"/runs/{refund.id}")
            reply = await alice.post(f"/runs/{refund.id}/decide",
                                     data=decision_form(page.text, verdict="approve"))
            assert reply.status_code == 303, reply.text[:1000]
            await refund.result()
            assert "Completed" in await seen(alice, refund.id)
            await unseen(carol, refund.id)
        finally:
            for web in webs.values():
                await web.aclose()
        await migration.terminate("test over")


async def test_a_configured_watcher_role_reads_every_run_and_decides_none(
    client: Client, task_queue: str, db_path: Path, streams: Path,
    scripted_worker: WorkerFactory,
) -> None:
    make_shop(db_path)
    async with scripted_worker(), inbox(client, watchers=frozenset({"auditor"})) as url:
        refund = await park_refund(client, task_queue)
        migration = await park_migration(client, task_queue)
        chat = await chat_thread(client, task_queue)
        walt = await signed_in(url, "walt")
        carol = await signed_in(url, "carol")
        try:
            listing = (await walt.get("/")).text
            assert refund.id in listing and migration.id in listing
            page = await seen(walt, refund.id)
            assert "may not decide this gate" in page and 'value="approve"' not in page
            await seen(walt, migration.id)
            await seen(walt, chat)
            before = await snapshot(refund)
            forged = await walt.post(f"/runs/{refund.id}/decide", data={
                "csrf": csrf_of(page), "verdict": "approve", "gate": "refund_review",
                "request": "3"})
            assert forged.status_code == 403 and "needs role manager" in forged.text
            assert await snapshot(refund) == before
            await unseen(carol, chat)  # the watcher role is walt's, not everyone's
        finally:
            await walt.aclose()
            await carol.aclose()
        await refund.terminate("test over")
        await migration.terminate("test over")
