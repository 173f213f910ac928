"""What the approver sees is what is signed, in the inbox and the notification (issue 30).

The ANSI-forged refund and the hidden-tail migration of tests/test_render_terminal.py, in
the inbox's list and decision page over HTTP and in headless Chromium, and in the Slack
and JSON notifications: every character of the signed proposal is on the page, the hidden
ones as visible escapes with a warning, nothing cut (a 10,000-character line, the last
statement after forty comments), and nothing of it read as HTML.
"""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from gatekit import make_shop, new_id, wait_pending
from headless import Browser, sync
from inboxkit import PASSWORD, browser_signed_in, inbox, issuer, signed_in
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
AMOUNT = ('<dt>amount_cents:</dt><dd><pre class="value">240000</pre>'
          '<span class="note">($2,400.00)</span>')
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
                assert f'<pre class="value">{SHOWN_REASON}{TAG}</pre>' in listed
                assert AMOUNT in listed
                assert "hidden or look-alike characters, shown as escapes" in listed
                page = await alice.get(f"/runs/{refund.id}")
                assert page.status_code == 200
                text = assert_inert(page.text)
                assert f'<pre class="value">{SHOWN_REASON}{TAG}</pre>' in text
                assert WARNING in text and f'value="{digest}"' in text
                assert AMOUNT in text
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
    script = text.split('<dt>script:</dt><dd><pre class="value">', 1)[1].split("</pre>", 1)[0]
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
                                "hidden or look-alike characters, shown as escapes")
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
    sections = [b["text"] for b in slack["blocks"] if b["type"] == "section"]
    assert all(b["type"] == "plain_text" and len(b["text"]) <= 3000 for b in sections)
    # The proposal in rich text: names as text, each value in quotes (its gutter in Slack).
    parts = [(part["type"], "".join(e["text"] for e in part["elements"]))
             for b in slack["blocks"] if b["type"] == "rich_text" for part in b["elements"]]
    assert all(len(text) <= 3000 for _, text in parts)
    quoted = "".join(text for kind, text in parts if kind == "rich_text_quote")
    body = "".join(text for _, text in parts)
    assert not [c for c in RAW if c in body + slack["text"]]
    assert "<!" not in body + slack["text"]  # no mention, no link
    assert ("rich_text_section", "amount_cents:  ($2,400.00)") in parts
    assert ("rich_text_quote", "240000") in parts and LONG in quoted
    assert "\\x1b[1A\\x1b[2K\\r    amount_cents: 500" in quoted
    assert quoted.endswith("\nDROP TABLE customers;")
    assert sections[-1]["text"] == f"WARNING: {WARNING}"
    data = message(NotifyPolicy(url="https://hooks.test/x", format="json"), notice)
    assert data["hidden"] is True and data["proposal"]["script"] == SCRIPT  # whole
    assert "    │ DROP TABLE customers;" in data["rendered"].splitlines()


# Issue 37, item 4: spaces only. Wrapped by a browser (pre-wrap: a run of spaces ends a row,
# at any width), the rest starts a row of its own that reads as a field.
PADDED = ("Please refund $2,400 on invoice INV-2004" + " " * 70 + "amount_cents: 500  ($5.00)"
          + " " * 60)
FIELDS = ["action", "amount", "amount_cents", "invoice_id", "limit", "reason"]
# The rows the page's layout made of an element's text: each character's box (a Range per
# character), grouped by the row it sits on; a row's x is where its first visible
# character is drawn.
ROWS_JS = """(el => {
  const chars = [], range = document.createRange();
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.data.trim()) continue;
    for (let i = 0; i < n.length; i++) {
      range.setStart(n, i); range.setEnd(n, i + 1);
      const box = range.getClientRects()[0];
      if (box) chars.push({c: n.data[i], x: box.left, mid: box.top + box.height / 2});
    }
  }
  const rows = [];
  for (const ch of chars) {
    let row = rows.find(r => Math.abs(r.mid - ch.mid) < 4);
    if (!row) rows.push(row = {mid: ch.mid, chars: []});
    row.chars.push(ch);
  }
  return rows.sort((a, b) => a.mid - b.mid).map(r => {
    r.chars.sort((a, b) => a.x - b.x);
    const first = r.chars.find(c => c.c.trim());
    return {text: r.chars.map(c => c.c).join(''), x: first ? first.x : 0};
  });
})(ELEMENT)"""


def field_names(rows: list[dict[str, Any]]) -> list[str]:
    """The names of the rows that start like a field ("name:") where the fields start."""
    named = [r for r in rows if re.match(r"\w+:", r["text"].strip())]
    at = min(r["x"] for r in named)
    return [r["text"].strip().split(":")[0] for r in named if abs(r["x"] - at) < 2]


@pytest.mark.browser
async def test_a_padded_value_never_reads_as_a_field_in_chromium(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    browser: Browser
) -> None:
    make_shop(db_path)
    issuer(client)
    async with scripted_worker():
        refund = await client.start_workflow(
            RefundAgent.run, RefundRequest(message=PADDED), id=new_id("refund-pad"),
            task_queue=task_queue)
        await wait_pending(refund)
        deployment = Deployment(roster=read_trust(trust, client.namespace).roster,
                                agents=frozenset({"refund"}), queues=frozenset({task_queue}))
        async with asyncio.timeout(30):
            while not await waiting_runs(client, ["manager"], deployment=deployment):
                await asyncio.sleep(0.2)
        async with inbox(client, deployment=deployment) as url:
            await browser_signed_in(browser, url, "alice")
            for width in (390, 1280):
                await sync(browser.call, "Emulation.setDeviceMetricsOverride", width=width,
                           height=900, deviceScaleFactor=1, mobile=False)
                await sync(browser.open, f"{url}/")
                await sync(browser.wait_for_text, refund.id)
                cell = ("[...document.querySelectorAll('table.runs tr')].find(tr => "
                        f"tr.innerText.includes({refund.id!r})).querySelector('td.proposal')")
                listed = await sync(browser.evaluate, ROWS_JS.replace("ELEMENT", cell))
                assert field_names(listed) == FIELDS, listed
                assert any("amount_cents:" in r["text"] for r in listed)  # in its gutter
                await sync(browser.screenshot, ARTIFACTS / f"inbox-padded-list-{width}.png")
                await sync(browser.open, f"{url}/runs/{refund.id}")
                await sync(browser.wait_for_text, "Awaiting your decision")
                entry = await sync(browser.evaluate, ROWS_JS.replace(
                    "ELEMENT", "document.querySelector('section.request')"))
                fields = await sync(browser.evaluate, ROWS_JS.replace(
                    "ELEMENT", "document.getElementById('proposal')"))
                assert field_names(fields) == FIELDS, fields
                assert [r for r in entry if r["text"].strip().startswith("Gate ")] == [
                    r for r in entry if r["text"].strip().startswith("Gate refund_review")]
                assert len([r for r in entry if "Gate " in r["text"]]) == 1
                await sync(browser.screenshot, ARTIFACTS / f"inbox-padded-{width}.png")
        await refund.terminate("test over")
