"""The inbox over plain HTTP on the real dev server: sign-in, sessions, CSRF, roles,
forged posts, the trusted-proxy header. Every refused request leaves the run waiting."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatekit import decide, refund_request, refunds, snapshot, wait_pending
from inboxkit import (
    PASSWORD,
    config,
    csrf_of,
    decision_form,
    inbox,
    issuer,
    park_refund,
    signed_in,
)
from temporalio.client import Client
from temporalio.worker import Worker

from tower.activities.model import ModelSettings
from tower.cli.inbox.identity import ProxyAuth
from tower.client._pending import pending_of
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long


def worker(client: Client, task_queue: str, db_path: Path) -> Worker:
    return build_worker(client, task_queue=task_queue, db_path=db_path, models=ModelSettings())


async def test_sign_in_session_cookie_and_csrf(client: Client, task_queue: str,
                                               db_path: Path) -> None:
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handle = await park_refund(client, task_queue)
        async with httpx.AsyncClient(base_url=url) as anon:
            assert (await anon.get("/")).status_code == 303  # to the sign-in page
            page = await anon.get("/login")
            bad = await anon.post("/login", data={"name": "alice", "password": "nope",
                                                  "csrf": csrf_of(page.text)})
            assert bad.status_code == 401 and "wrong password" in bad.text
            no_token = await anon.post("/login", data={"name": "alice", "password": PASSWORD})
            assert no_token.status_code == 403
            ok = await anon.post("/login", data={"name": "alice", "password": PASSWORD,
                                                 "csrf": csrf_of(page.text)})
            cookie = ok.headers["set-cookie"].lower()
            assert ok.status_code == 303 and "tower_inbox=" in cookie
            assert "httponly" in cookie and "samesite=lax" in cookie
            assert "secure" not in cookie  # plain HTTP here; see the TLS test below
        alice = await signed_in(url, "alice")
        try:
            page = await alice.get(f"/runs/{handle.id}")
            assert page.status_code == 200 and "Approve" in page.text
            assert "default-src 'none'" in page.headers["content-security-policy"]
            # No secret in any page: the issuer's private key and the session secret stay
            # on the server (the decision is signed there).
            private = issuer(client)["d"]
            for shown in (page, await alice.get("/"), await alice.get("/login")):
                assert private not in shown.text and "test-session-secret" not in shown.text
            before = await snapshot(handle)
            # A decision without the CSRF token, then with a wrong one: refused, unsent.
            form = decision_form(page.text, verdict="approve")
            for token in (None, "forged-token"):
                data = {k: v for k, v in form.items() if k != "csrf"}
                if token is not None:
                    data["csrf"] = token
                reply = await alice.post(f"/runs/{handle.id}/decide", data=data)
                assert reply.status_code == 403 and "CSRF token" in reply.text
            # Out of range (above the planned amount), not an amount, in cents: refused,
            # each with the reason, nothing sent.
            for typed, problem in (
                ({"money.amount_cents": "1,300"},
                 "amount must be between $0.01 and $1,200.00 (lower only); got $1,300.00"),
                ({"money.amount_cents": "12.345"}, "more than two decimals"),
                ({"money.amount_cents": "twelve"}, "is not an amount in dollars"),
                ({"edit.amount_cents": "90000"}, "amounts are entered in currency")):
                reply = await alice.post(f"/runs/{handle.id}/decide", data={**form, **typed})
                assert reply.status_code == 400 and problem in reply.text, reply.text
                assert "Nothing was sent" in reply.text
            assert await snapshot(handle) == before
            # Approved once, in currency; the answer is a page of its own (post/redirect/get)
            # restating what was decided. The same post replayed (a resubmit, a captured
            # request) is refused and pays nothing more.
            lowered = {**form, "money.amount_cents": "900", "note": "partial"}
            reply = await alice.post(f"/runs/{handle.id}/decide", data=lowered)
            assert reply.status_code == 303 and reply.headers["location"].startswith("/decided/")
            receipt = await alice.get(reply.headers["location"])
            assert receipt.status_code == 200 and "Gate refund_review: approved" in receipt.text
            for said in ("Approved", "<b>alice</b> (manager)", "Amount <b>$900.00</b> (proposed "
                         "$1,200.00)", "limit $500.00", "Note: partial", " UTC</b>"):
                assert said in receipt.text, said
            # Only alice may read what alice decided.
            bob = await signed_in(url, "bob")
            assert (await bob.get(reply.headers["location"])).status_code == 404
            await bob.aclose()
            assert (await handle.result()).amount_cents == 90000
            after = await snapshot(handle)
            replayed = await alice.post(f"/runs/{handle.id}/decide", data=lowered)
            assert replayed.status_code == 409 and "Nothing was sent" in replayed.text
            assert refunds(db_path) == [("INV-2004", 90000)]
            assert await snapshot(handle) == after
        finally:
            await alice.aclose()


async def test_an_approver_without_the_role_sees_no_run_and_a_forged_post_is_refused(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handle = await park_refund(client, task_queue)
        carol = await signed_in(url, "carol")  # support: not a manager
        try:
            listing = await carol.get("/")
            assert handle.id not in listing.text and "Nothing is waiting" in listing.text
            # Not hers to decide, so not hers to see: the 404 of a run that is not there.
            page = await carol.get(f"/runs/{handle.id}")
            assert page.status_code == 404 and "No run" in page.text
            assert 'value="approve"' not in page.text and "refund_review" not in page.text
            before = await snapshot(handle)
            # Everything a manager's form would carry, but carol is no manager.
            step = (await pending_of(client, handle.id))[1].step  # type: ignore[union-attr]
            forged = await carol.post(f"/runs/{handle.id}/decide", data={
                "verdict": "approve", "gate": "refund_review", "request": str(step),
                "csrf": csrf_of(listing.text)})
            assert forged.status_code == 404 and "No run" in forged.text
            assert await snapshot(handle) == before
        finally:
            await carol.aclose()
        await handle.terminate("test over")


async def test_a_trusted_proxy_header_signs_in_only_from_the_proxy(
    client: Client, task_queue: str, db_path: Path
) -> None:
    roles = {"alice@example.com": ("manager",)}
    trusted = config(client, accounts=None,
                     proxy=ProxyAuth("X-Forwarded-User", frozenset({"127.0.0.1"}), roles))
    untrusted = config(client, accounts=None,
                       proxy=ProxyAuth("X-Forwarded-User", frozenset({"10.0.0.9"}), roles))
    async with worker(client, task_queue, db_path):
        handle = await park_refund(client, task_queue)
        async with inbox(client, config=trusted) as url, httpx.AsyncClient(base_url=url) as web:
            assert (await web.get("/")).status_code == 401  # no header: nobody
            unknown = await web.get("/", headers={"X-Forwarded-User": "mallory"})
            assert unknown.status_code == 401  # not in the role map
            page = await web.get("/", headers={"X-Forwarded-User": "alice@example.com"})
            assert page.status_code == 200 and handle.id in page.text
            assert "alice@example.com · roles: manager" in page.text
        async with inbox(client, config=untrusted) as url, httpx.AsyncClient(base_url=url) as web:
            # The header from a connection that is not the proxy's proves nothing.
            spoofed = await web.get("/", headers={"X-Forwarded-User": "alice@example.com"})
            assert spoofed.status_code == 401
        await handle.terminate("test over")


async def test_the_session_cookie_is_secure_when_served_over_tls(client: Client) -> None:
    async with inbox(client, secure_cookies=True) as url, \
            httpx.AsyncClient(base_url=url) as web:
        page = await web.get("/login")
        assert "; secure" in page.headers["set-cookie"].lower()


async def test_a_stale_recheck_and_an_expired_request_are_shown(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path), inbox(client) as url:
        stale = await park_refund(client, task_queue)
        expiring = await park_refund(client, task_queue, review_timeout_seconds=5)
        alice = await signed_in(url, "alice")
        try:
            # alice opens the other request at once; it expires while the page is open.
            expiring_page = await alice.get(f"/runs/{expiring.id}")
            page = await alice.get(f"/runs/{stale.id}")
            # While alice reads, someone else refunds $1,500 of the $2,400 invoice.
            with sqlite3.connect(db_path) as db:
                db.execute("INSERT INTO refunds VALUES ('rf_other','INV-2004',150000,'x','k')")
            reply = await alice.post(f"/runs/{stale.id}/decide", data=decision_form(
                page.text, verdict="approve"), follow_redirects=True)
            assert reply.status_code == 200, reply.text
            assert "Not applied (stale)" in reply.text
            assert "Gate refund_review: stale. The re-check found the world changed" in reply.text
            assert "$900.00 refundable now" in reply.text and "went back to reason" in reply.text
            assert refunds(db_path) == [("INV-2004", 150000)]  # nothing paid on the stale plan
            # The run re-planned and asks again; the page shows the earlier decision.
            again = await alice.get(f"/runs/{stale.id}")
            for _ in range(100):
                if "Earlier decisions" in again.text:
                    break
                await asyncio.sleep(0.2)
                again = await alice.get(f"/runs/{stale.id}")
            assert "refund_review: stale by alice (manager)" in again.text
            assert 'value="900.00"' in again.text
            # The first page's form posted again: it decided the earlier request, so it
            # cannot decide the new one the approver has not seen.
            before = await snapshot(stale)
            replayed = await alice.post(f"/runs/{stale.id}/decide", data=decision_form(
                page.text, verdict="approve"))
            assert replayed.status_code == 400 and "for an earlier request" in replayed.text
            assert await snapshot(stale) == before
            # The other request expires while its page is open; deciding it is refused.
            assert (await expiring.result()).status == "DONE"
            reply = await alice.post(f"/runs/{expiring.id}/decide", data=decision_form(
                expiring_page.text, verdict="approve"))
            assert reply.status_code == 409
            assert "no longer waiting for a decision (gate refund_review: expired" in reply.text
        finally:
            await alice.aclose()
        await stale.terminate("test over")


async def test_the_run_refuses_a_role_the_inbox_issuer_may_not_vouch_for(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # This inbox's roster entry vouches for DBAs only; alice is a manager in the inbox.
    dba_only = issuer(client, "inbox-dba-only", vouches_for=("dba",))
    async with worker(client, task_queue, db_path), \
            inbox(client, issuer=dba_only) as url:
        handle = await park_refund(client, task_queue)
        alice = await signed_in(url, "alice")
        try:
            page = await alice.get(f"/runs/{handle.id}")
            before = await snapshot(handle)
            reply = await alice.post(f"/runs/{handle.id}/decide", data=decision_form(
                page.text, verdict="approve"))
            assert reply.status_code == 409
            assert "Refused by the run" in reply.text
            assert "issuer inbox-dba-only may not vouch for role" in reply.text
            assert await snapshot(handle) == before
        finally:
            await alice.aclose()
        await handle.terminate("test over")


async def test_what_a_requester_wrote_is_shown_as_text_never_as_markup(
    client: Client, task_queue: str, db_path: Path
) -> None:
    attack = "Please refund $1,200 on invoice INV-2004 <script>alert('x')</script><img src=x>"
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handle = await park_refund(client, task_queue, message=attack)
        alice = await signed_in(url, "alice")
        try:
            listing = (await alice.get("/")).text
            page = (await alice.get(f"/runs/{handle.id}")).text
        finally:
            await alice.aclose()
        await handle.terminate("test over")
    for html in (listing, page):
        assert "&lt;script&gt;alert(" in html  # the proposal's reason, escaped
        assert "<script>alert(" not in html and "<img src=x>" not in html


async def test_a_session_cookie_from_another_tenants_inbox_is_refused(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # Two tenants' inboxes sharing one session secret (the worst case): alice signs in to
    # the other tenant's inbox, and its cookie is carried to this tenant's.
    elsewhere = config(client, tenant="other-tenant")
    async with worker(client, task_queue, db_path), inbox(client) as url, \
            inbox(client, config=elsewhere) as other_url:
        handle = await park_refund(client, task_queue)
        theirs, ours = await signed_in(other_url, "alice"), await signed_in(url, "alice")
        try:
            form = decision_form((await ours.get(f"/runs/{handle.id}")).text, verdict="approve")
            cookie = theirs.cookies["tower_inbox"]
            their_csrf = csrf_of((await theirs.get("/")).text)
        finally:
            await theirs.aclose()
            await ours.aclose()
        before = await snapshot(handle)
        async with httpx.AsyncClient(base_url=url, cookies={"tower_inbox": cookie}) as web:
            listing = await web.get("/")
            assert listing.status_code == 303 and listing.headers["location"] == "/login?next=/"
            posted = await web.post(f"/runs/{handle.id}/decide", data={**form, "csrf": their_csrf})
            assert posted.status_code == 303  # to the sign-in page: nobody is signed in here
        assert await snapshot(handle) == before
        await handle.terminate("test over")


async def test_a_page_shown_for_a_look_alike_run_signs_nothing_for_the_real_one(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """alice opens a $5 request; its run is ended and a $2,400 refund parks under the same
    workflow id at the same gate and step. The $5 page's form, posted: refused before
    anything is signed, nothing paid. A fresh page decides the $2,400 it shows."""
    async with worker(client, task_queue, db_path), inbox(client) as url:
        small = await park_refund(client, task_queue, limit_cents=100,
                                  message="Please refund $5 on invoice INV-2004")
        alice = await signed_in(url, "alice")
        try:
            page = await alice.get(f"/runs/{small.id}")
            assert "$5.00" in page.text
            await small.terminate("the look-alike is ended")
            big = await client.start_workflow(
                RefundAgent.run, refund_request(client, small.id, message="Please refund "
                                                "$2,400 on invoice INV-2004"),
                id=small.id, task_queue=task_queue)
            await wait_pending(big)
            async with asyncio.timeout(30):
                while "$2,400.00" not in (await alice.get(f"/runs/{big.id}")).text:
                    await asyncio.sleep(0.1)
            before = await snapshot(big)
            reply = await alice.post(f"/runs/{big.id}/decide", data=decision_form(
                page.text, verdict="approve"))
            assert reply.status_code == 400 and "the request changed since this page was " \
                "shown" in reply.text
            assert await snapshot(big) == before and refunds(db_path) == []
            fresh = await alice.get(f"/runs/{big.id}")
            reply = await alice.post(f"/runs/{big.id}/decide", data=decision_form(
                fresh.text, verdict="approve"), follow_redirects=True)
            assert reply.status_code == 200 and "Gate refund_review: approved" in reply.text
            await big.result()
        finally:
            await alice.aclose()
    assert refunds(db_path) == [("INV-2004", 240000)]


async def changes(web: httpx.AsyncClient, until: str, **params: str) -> dict[str, Any]:
    """The first ``change`` event of ``/api/changes`` (server-sent) whose data holds ``until``."""
    async with asyncio.timeout(30), web.stream("GET", "/api/changes", params=params) as live:
        assert live.headers["content-type"].startswith("text/event-stream")
        async for line in live.aiter_lines():
            if line.startswith("data: ") and until in line:
                return dict(json.loads(line[6:]))
    raise AssertionError(f"/api/changes ended without {until!r}")


def fingerprint_of(page: str) -> str:
    found = re.search(r'id="live"[^>]*data-fingerprint="([^"]*)"', page)
    assert found, page[-1500:]
    return unescape(found[1])


async def test_the_open_list_and_decision_page_hear_of_changes(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """What the live pages follow: the list's rows when a request parks, and on a decision
    page what became of its run once another approver decided it."""
    async with worker(client, task_queue, db_path), inbox(client) as url:
        alice = await signed_in(url, "alice")
        try:
            shown = fingerprint_of((await alice.get("/")).text)
            handle = await park_refund(client, task_queue)
            listed = await changes(alice, handle.id, fingerprint=shown)
            assert handle.id in listed["html"] and "<tr>" in listed["html"]
            page = await alice.get(f"/runs/{handle.id}")
            await decide(client, handle, (await wait_pending(handle))["pending"],
                         approver="bob")
            told = await changes(alice, "already decided", run=handle.id,
                                 fingerprint=fingerprint_of(page.text))
            assert "approved by bob" in told["message"]
        finally:
            await alice.aclose()
        await handle.result()
