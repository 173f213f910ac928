"""What the approver sees is what is signed, in the inbox and the notification (issue 30).

The ANSI-forged refund and the hidden-tail migration of tests/test_render_terminal.py, in
the inbox's list and decision page over HTTP and in headless Chromium, and in the Slack
and JSON notifications: every character of the signed proposal is on the page, the hidden
ones as visible escapes with a warning, nothing cut (a 10,000-character line, the last
statement after forty comments), and nothing of it read as HTML.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from gatekit import make_shop, new_id, wait_pending
from headless import Browser, sync
from inboxkit import PASSWORD, inbox, issuer, signed_in
from temporalio.client import Client
from test_render_terminal import LONG, MESSAGE, REASON, SCRIPT

from tower.activities.notify import message
from tower.activities.trust import read_trust
from tower.cli.inbox.visibility import waiting_runs
from tower.client._pending import Deployment
from tower.contract.decisions import GateRecord, canonical_proposal, proposal_digest
from tower.contract.notify import GateNotice, NotifyPolicy
from tower.contract.render import WARNING
from workflows.migration import MigrationAgent, MigrationRequest
from workflows.refund import RefundAgent, RefundRequest

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
TAG = "<i>x</i>"  # HTML in the refund message: text on every page, never markup
SHOWN_REASON = REASON.strip().removeprefix("reason: ")
RAW = ("\x1b", "\x08", "\r", "\u202e", "\u202c", "\u200b", "\u2066", "\x07")


async def park_both(client: Client, task_queue: str, trust: Path) -> tuple[Any, Any,
                                                                              Deployment]:
    issuer(client)
    refund = await client.start_workflow(
        RefundAgent.run, RefundRequest(message=MESSAGE + TAG), id=new_id("refund-lie"),
        task_queue=task_queue)
    migration = await client.start_workflow(
        MigrationAgent.run, MigrationRequest(database="shop", script=SCRIPT),
        id=new_id("migration-tail"), task_queue=task_queue)
    await wait_pending(refund)
    await wait_pending(migration)
    deployment = Deployment(roster=read_trust(trust, client.namespace).roster,
                            agents=frozenset({"refund", "migration"}),
                            queues=frozenset({task_queue}))
    async with asyncio.timeout(30):  # visibility is eventually consistent
        while len(await waiting_runs(client, ["manager", "dba"], deployment=deployment)) < 2:
            await asyncio.sleep(0.2)
    return refund, migration, deployment


def assert_inert(html: str) -> str:
    """The page's text; no hidden character in it raw, no run text read as HTML."""
    assert not [c for c in RAW if c in html]
    assert TAG not in html and "&lt;i&gt;x&lt;/i&gt;" in html
    return unescape(html)


async def test_the_inbox_shows_every_character_signed(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any
) -> None:
    make_shop(db_path)
    async with scripted_worker():
        refund, migration, deployment = await park_both(client, task_queue, trust)
        pending = (await refund.query("approvals", result_type=dict))["pending"]
        digest = proposal_digest(GateRecord.model_validate(pending))
        async with inbox(client, deployment=deployment) as url:
            alice, dave = await signed_in(url, "alice"), await signed_in(url, "dave")
            try:
                listed = assert_inert((await alice.get("/")).text)
                assert f'<span class="value">{SHOWN_REASON}{TAG}</span>' in listed
                assert 'amount_cents: <span class="value">240000</span> ($2,400.00)' in listed
                assert "hidden characters, shown as escapes" in listed
                page = await alice.get(f"/runs/{refund.id}")
                assert page.status_code == 200
                text = assert_inert(page.text)
                assert f"<pre>{SHOWN_REASON}{TAG}</pre>" in text
                assert WARNING in text and f'value="{digest}"' in text
                assert "<th>amount_cents</th><td><pre>240000</pre>" in text
                tail = assert_inert_migration((await dave.get(f"/runs/{migration.id}")).text)
                assert tail.endswith("DROP TABLE customers;")
                listed = unescape((await dave.get("/")).text)
                assert LONG in listed and "DROP TABLE customers;" in listed
            finally:
                await alice.aclose()
                await dave.aclose()
        await refund.terminate("test over")
        await migration.terminate("test over")


def assert_inert_migration(html: str) -> str:
    assert not [c for c in RAW if c in html]
    text = unescape(html)
    script = text.split("<th>script</th><td><pre>", 1)[1].split("</pre>", 1)[0]
    assert LONG in script.splitlines()  # the 10,000-character line, whole
    assert "-- \\x1b]0;owned\\x07 ⟨U+2066⟩hidden⟨U+2069⟩" in script.splitlines()
    return script


@pytest.mark.browser
async def test_the_decision_page_in_chromium_shows_the_true_request(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    browser: Browser
) -> None:
    make_shop(db_path)
    async with scripted_worker():
        refund, migration, deployment = await park_both(client, task_queue, trust)
        async with inbox(client, deployment=deployment) as url:
            await sync(browser.open, f"{url}/login")
            await sync(browser.wait_for_text, "Password")
            await sync(browser.fill, "input[name=name]", "alice")
            await sync(browser.fill, "input[name=password]", PASSWORD)
            await sync(browser.click_text, "Sign in")
            listed = await sync(browser.wait_for_text, "Waiting for your decision",
                                "hidden characters, shown as escapes")
            assert SHOWN_REASON + TAG in listed
            await sync(browser.open, f"{url}/runs/{refund.id}")
            text = await sync(browser.wait_for_text, "Awaiting your decision", WARNING)
            assert SHOWN_REASON + TAG in text and "240000" in text and "$2,400.00" in text
            assert not [c for c in RAW if c in text]
            await sync(browser.screenshot, ARTIFACTS / "inbox-hidden-characters.png")
        await refund.terminate("test over")
        await migration.terminate("test over")


def test_the_notification_carries_the_whole_request_inert() -> None:
    record = GateRecord(gate="refund_review", node="issue_refund", when="before", visit=1,
                        step=4, role="manager", run_id="r",
                        proposal={"amount_cents": 240000, "reason": MESSAGE + "<!channel>",
                                  "script": SCRIPT},
                        requested_at=datetime(2026, 12, 4, tzinfo=UTC),
                        expires_at=datetime(2026, 12, 6, tzinfo=UTC))
    notice = GateNotice(tenant="acme", run="refund <!here> 1", agent="refund",
                        gate="refund_review", role="manager", node="issue_refund",
                        expires_at=record.expires_at, proposal=record.proposal,
                        shown=canonical_proposal(record))
    slack = message(NotifyPolicy(url="https://hooks.test/x", format="slack"), notice)
    blocks = [b["text"] for b in slack["blocks"] if b["type"] == "section"]
    assert all(b["type"] == "plain_text" and len(b["text"]) <= 3000 for b in blocks)
    body = "".join(b["text"] for b in blocks[1:])
    assert not [c for c in RAW if c in body + slack["text"]]
    assert "<!" not in body + slack["text"]  # no mention, no link
    assert "amount_cents: 240000  ($2,400.00)" in body and LONG in body
    assert "\\x1b[1A\\x1b[2K\\r    amount_cents: 500" in body
    assert body.rstrip().endswith(f"WARNING: {WARNING}") or blocks[-1]["text"].startswith(
        "WARNING")
    assert "    DROP TABLE customers;" in body.splitlines()
    data = message(NotifyPolicy(url="https://hooks.test/x", format="json"), notice)
    assert data["hidden"] is True and data["proposal"]["script"] == SCRIPT  # whole
    assert "    DROP TABLE customers;" in data["rendered"].splitlines()
