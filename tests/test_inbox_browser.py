"""The inbox in headless Chromium, on the real dev server with a real worker.

A manager sees only the refunds a manager may decide (a new one appears on the open
list by itself); the decision page says "Awaiting your decision", shows the amount in
currency beside the limit and the agent drawn as SVG (no Graphviz needed) with the node
the run waits at highlighted; she lowers the amount (typed in currency) and approves, a
page of its own restates what she decided (and survives a reload), and the run pays the
lowered amount; a second manager's page says "already decided" when
another approver decides first, and posting anyway is refused; an approver without the
role gets no button and a forged post (with or without the CSRF token) is refused; a
DBA rejects a destructive migration. Screenshots of the list, the decision page and the
restated decision go to test-artifacts/ (copied to docs/ for docs/inbox.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gatekit import decide, make_shop, refunds, snapshot, wait_pending
from headless import Browser, sync
from inboxkit import PASSWORD, inbox, park_migration, park_refund
from temporalio.client import Client

from tower.activities.model import ModelSettings
from worker import build_worker

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# Needs headless Chromium; run with `pytest -m browser` (.ci/run does).
pytestmark = pytest.mark.browser




async def sign_in(b: Browser, url: str, name: str) -> str:
    await sync(b.open, f"{url}/login")
    await sync(b.wait_for_text, "Sign in", "Password")
    await sync(b.fill, "input[name=name]", name)
    await sync(b.fill, "input[name=password]", PASSWORD)
    await sync(b.click_text, "Sign in")
    text: str = await sync(b.wait_for_text, "Waiting for your decision", f"{name} · roles")
    return text


async def sign_out(b: Browser) -> None:
    await sync(b.click_text, "Sign out")
    await sync(b.wait_for_text, "Password")


def post_from_page(run: str, with_token: bool) -> str:
    """A form post forged in the page's own script: the session cookie goes along."""
    token = ("document.querySelector('input[name=csrf]').value" if with_token else "''")
    return (f"fetch('/runs/{run}/decide', {{method: 'POST', body: new URLSearchParams("
            f"{{verdict: 'approve', gate: 'refund_review', csrf: {token}}})}})"
            ".then(async r => [r.status, await r.text()])")


async def test_approvers_decide_in_the_browser(
    client: Client, task_queue: str, db_path: Path, browser: Browser
) -> None:
    b = browser
    make_shop(db_path)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()), inbox(client, web_ui="http://ui.test") as url:
        first, second = [await park_refund(client, task_queue) for _ in range(2)]
        migration = await park_migration(client, task_queue)

        # A manager sees the refunds, not the migration; lowers one and approves it.
        listing = await sign_in(b, url, "alice")
        assert first.id in listing and second.id in listing
        assert migration.id not in listing and "dba_review" not in listing
        # A refund that parks while the list is open appears on it by itself.
        third = await park_refund(client, task_queue)
        listing = await sync(b.wait_for_text, third.id, first.id, seconds=30)
        assert migration.id not in listing
        await sync(b.screenshot, ARTIFACTS / "inbox-list.png")
        # Each value in a block of its own beside its name (innerText: a line apart).
        assert "amount:\n$1,200.00" in listing and "limit:\n$500.00" in listing
        await sync(b.open, f"{url}/runs/{first.id}")
        page = await sync(b.wait_for_text, "Awaiting your decision", "Gate refund_review",
                          "Amount $1,200.00 limit $500.00", "lower only", "Approve",
                          "invoice_balance")
        request = await sync(b.evaluate, "document.querySelector('section.request').innerText")
        # The whole signed proposal: the cents as signed, read in currency beside them.
        assert "status RUNNING" not in page
        assert all(t in request for t in ("amount_cents", "120000", "$1,200.00"))
        assert "between $0.01 and $1,200.00" in page and "open in the Temporal Web UI" in page
        # The agent, drawn here (no Graphviz): its nodes, the waiting one highlighted.
        drawn = await sync(b.evaluate, "[...document.querySelectorAll("
                           "'section.picture svg g.node')].map(g => g.dataset.node)")
        assert {"reason", "issue_refund", "confirm", "decline"} <= set(drawn)
        assert await sync(b.evaluate, "document.querySelector('section.picture svg "
                          "g.node.waiting').dataset.node") == "issue_refund"
        assert await sync(b.evaluate, "document.querySelector('section.picture svg')"
                          ".getBoundingClientRect().height") > 200  # drawn, not text
        assert await sync(b.evaluate, "document.querySelector(\"input[name='money.amount_cents']\")"
                          ".value") == "1200.00"
        await sync(b.screenshot, ARTIFACTS / "inbox-decision.png")
        await sync(b.fill, "input[name='money.amount_cents']", "900")
        await sync(b.fill, "textarea[name=note]", "partial refund agreed")
        await sync(b.click_text, "Approve")
        restated = await sync(b.wait_for_text, "Approved", "Gate refund_review: approved",
                              "Amount $900.00 (proposed $1,200.00) limit $500.00",
                              "You, alice (manager), approved gate refund_review",
                              "Note: partial refund agreed")
        assert " UTC" in restated and first.id in restated
        assert (await sync(b.evaluate, "location.pathname")).startswith("/decided/")
        await sync(b.screenshot, ARTIFACTS / "inbox-decided.png")
        # Post/redirect/get: a reload shows the same page and decides nothing again.
        await sync(b.evaluate, "location.reload()")
        await sync(b.wait_for_text, "Amount $900.00 (proposed $1,200.00)")
        state = await first.result()
        assert state.status == "DONE" and state.amount_cents == 90000
        await sync(b.open, f"{url}/runs/{first.id}")
        await sync(b.wait_for_text, "not waiting for a decision", "approved by alice",
                   "Your refund of $900.00 has been issued")
        assert ("INV-2004", 90000) in refunds(db_path)

        # A race: bob decides the second refund while alice's page is open on it.
        await sync(b.open, f"{url}/runs/{second.id}")
        await sync(b.wait_for_text, "Approve")
        pending = (await wait_pending(second))["pending"]
        await decide(client, second, pending, approver="bob")
        await sync(b.wait_for_text, "already decided", "approved by bob", seconds=30)
        assert await sync(b.evaluate, "document.querySelector('button.approve').disabled")
        await sync(b.evaluate, "document.querySelector('form.decide').submit()")
        await sync(b.wait_for_text, "approved by bob", "Nothing was sent")
        await sign_out(b)

        # No role: no run (a 404, as for a run that is not there), no button; a forged post
        # is refused with and without the CSRF token.
        before = await snapshot(third)
        listing = await sign_in(b, url, "carol")
        assert third.id not in listing
        await sync(b.open, f"{url}/runs/{third.id}")
        await sync(b.wait_for_text, f"No run '{third.id}'")
        assert not await sync(b.evaluate, "!!document.querySelector('button.approve')")
        status, text = await sync(b.evaluate, post_from_page(third.id, with_token=True))
        assert status == 404 and "No run" in text
        status, text = await sync(b.evaluate, post_from_page(third.id, with_token=False))
        assert status == 403 and "CSRF token is missing or wrong" in text
        assert await snapshot(third) == before
        await sign_out(b)

        # A DBA sees the migration only, and rejects it.
        listing = await sign_in(b, url, "dave")
        assert migration.id in listing and third.id not in listing
        await sync(b.open, f"{url}/runs/{migration.id}")
        await sync(b.wait_for_text, "Gate dba_review", "DROP TABLE legacy_notes")
        await sync(b.fill, "textarea[name=note]", "keep the fax numbers")
        await sync(b.click_text, "Reject")
        await sync(b.wait_for_text, "Rejected", "You, dave (dba), rejected gate dba_review",
                   "Gate dba_review: rejected")
        result = await migration.result()
        assert not result.applied
        assert json.dumps(result.report).find("rejected by dave: keep the fax numbers") > 0
        await third.terminate("test over")
