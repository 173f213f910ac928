"""Attacks on the inbox itself, on the real dev server with a real worker: guessing
passwords, a session cookie kept past sign-out, forged requests, a forged "unsigned" flag.
Each shows the attack failing with the run unchanged, and a genuine decision still working.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatekit import new_id, refund_request, refunds, snapshot, wait_pending
from inboxkit import PASSWORD, csrf_of, decision_form, inbox, issuer, park_refund, signed_in
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from tower.activities.model import ModelSettings
from tower.client._pending import pending_of
from tower.contract import search
from tower.contract.pending import PendingView
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long


def worker(client: Client, task_queue: str, db_path: Path) -> Worker:
    return build_worker(client, task_queue=task_queue, db_path=db_path, models=ModelSettings())


async def approve(web: httpx.AsyncClient, run: str, amount: str) -> str:
    """Approve ``run`` at ``amount`` (typed in currency) as a browser would; the page that
    restates the decision."""
    page = await web.get(f"/runs/{run}")
    assert page.status_code == 200 and "Awaiting your decision" in page.text, page.text[:2000]
    reply = await web.post(f"/runs/{run}/decide", data=decision_form(
        page.text, verdict="approve", **{"money.amount_cents": amount}))
    assert reply.status_code == 303, reply.text
    receipt = await web.get(reply.headers["location"])
    assert receipt.status_code == 200 and "Gate refund_review: approved" in receipt.text
    return receipt.text


async def attempt(web: httpx.AsyncClient, name: str, password: str) -> httpx.Response:
    page = await web.get("/login")
    return await web.post("/login", data={"name": name, "password": password,
                                          "csrf": csrf_of(page.text)})


class Clock:
    """The sign-in limits' clock, moved by the test: no real minute is slept."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def from_address(url: str, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=60, transport=httpx.AsyncHTTPTransport(
        local_address=address))


# The figure (a guess every tenth of a second) in the soak tier; the default tier
# spreads 50 guesses over the same 100 s, a guess every 2 s, which meets every step of the
# delay (1, 2, 4, 8, 16 s) up to its cap (30 s) and guesses during most of them.
@pytest.mark.parametrize(("guesses", "every"), [
    (50, 2.0), pytest.param(1000, 0.1, marks=pytest.mark.soak)])
async def test_a_flood_of_wrong_passwords_cannot_lock_an_approver_out(
    client: Client, task_queue: str, db_path: Path, guesses: int, every: float
) -> None:
    """1,000 failed sign-ins as alice from one address in 100 s (issue 30, attack 6): alice
    signs in from another address at once, and from that address within a minute."""
    clock = Clock()
    async with worker(client, task_queue, db_path), inbox(client, sign_in_clock=clock) as url:
        handle = await park_refund(client, task_queue)
        statuses: list[int] = []
        async with from_address(url, "127.0.0.2") as mallory:
            csrf = csrf_of((await mallory.get("/login")).text)
            for i in range(guesses):
                clock.now += every  # for 100 s
                reply = await mallory.post("/login", data={
                    "name": "alice", "password": f"guess{i}", "csrf": csrf})
                statuses.append(reply.status_code)
            # During a wait even the right password is refused unread: guessing gains nothing.
            locked = await mallory.post("/login", data={
                "name": "alice", "password": PASSWORD, "csrf": csrf})
            assert locked.status_code == 429, locked.text
            assert (await mallory.get("/")).status_code == 303  # nobody is signed in
        assert set(statuses) == {401, 429} and statuses[:5] == [401] * 5
        # The guesser got a wrong password checked only a handful of times in 100 s.
        assert statuses.count(401) < 20, statuses.count(401)
        retry = int(locked.headers["retry-after"])
        assert 0 < retry <= 31 and "try again in" in locked.text
        # From another address, alice signs in at once and decides.
        alice = await signed_in(url, "alice")
        try:
            assert "Amount <b>$900.00</b>" in await approve(alice, handle.id, "900.00")
        finally:
            await alice.aclose()
        assert (await handle.result()).amount_cents == 90000
        # From the flooded address: after the wait it asked for (under a minute), at once.
        clock.now += retry
        async with from_address(url, "127.0.0.2") as same:
            assert (await attempt(same, "alice", PASSWORD)).status_code == 303
        # One address spraying names delays no other name there (issue 37, item 5).
        async with from_address(url, "127.0.0.3") as sprayer:
            for i in range(20):
                clock.now += 0.1
                assert (await attempt(sprayer, f"user{i}", "guess")).status_code == 401
            assert (await attempt(sprayer, "carol", PASSWORD)).status_code == 303
    assert refunds(db_path) == [("INV-2004", 90000)]


async def test_a_trickle_of_failures_cannot_keep_a_colleague_out(client: Client) -> None:
    """The trickle (issue 37, item 5), over HTTP on the real inbox server. From the
    address dave shares, an attacker that has failed 20 times there already (a spray of
    names) fails as eve, then as alice, again the moment each wait the inbox names
    (Retry-After) ends, for 135 s each (the limits' clock, moved). After every one of its
    failures, dave types his right password from the same address: signed in at the first
    try, never a 429 (the bound in docs/inbox.md is 2 s), while the attacker stays slowed."""
    clock = Clock()
    async with inbox(client, sign_in_clock=clock) as url, \
            from_address(url, "127.0.0.2") as attacker:
        csrf = csrf_of((await attacker.get("/login")).text)

        async def fail(name: str) -> httpx.Response:
            return await attacker.post("/login", data={"name": name, "password": "guess",
                                                       "csrf": csrf})

        for i in range(20):
            assert (await fail(f"eve{i}")).status_code == 401
        for target in ("eve", "alice"):
            start, failures, waits = clock.now, 0, []
            while clock.now < start + 135:
                reply = await fail(target)
                if reply.status_code == 429:  # wait exactly as long as asked, then again
                    waits.append(int(reply.headers["retry-after"]))
                    clock.now += waits[-1]
                    continue
                assert reply.status_code == 401, reply.text
                failures += 1
                async with from_address(url, "127.0.0.2") as dave:
                    assert (await attempt(dave, "dave", PASSWORD)).status_code == 303
            # The attacker's own name is still slowed: a few failures in 135 s.
            assert 5 <= failures <= 15 and max(waits) >= 16, (failures, waits)


async def test_a_session_cookie_copied_before_sign_out_is_dead_after_it(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handle = await park_refund(client, task_queue)
        alice = await signed_in(url, "alice")
        page = await alice.get(f"/runs/{handle.id}")
        form = decision_form(page.text, verdict="approve")
        stolen = alice.cookies["tower_inbox"]
        reply = await alice.post("/logout", data={"csrf": csrf_of(page.text)})
        assert reply.status_code == 303 and reply.headers["location"] == "/login"
        await alice.aclose()
        before = await snapshot(handle)
        # The copied cookie is still validly signed and unexpired: the server forgot it.
        async with httpx.AsyncClient(base_url=url, cookies={"tower_inbox": stolen}) as thief:
            listing = await thief.get("/")
            assert listing.status_code == 303 and listing.headers["location"] == "/login?next=/"
            assert (await thief.get(f"/runs/{handle.id}")).status_code == 303
            posted = await thief.post(f"/runs/{handle.id}/decide", data=form)
            assert posted.status_code == 303 and posted.headers["location"].startswith("/login")
        assert await snapshot(handle) == before
        # alice signs in again: a new session, and her decision goes through.
        alice = await signed_in(url, "alice")
        try:
            await approve(alice, handle.id, "1,000")
        finally:
            await alice.aclose()
        assert (await handle.result()).amount_cents == 100000


def forged(agent: str = "refund", node: str = "issue_refund",
           gate: str = "refund_review") -> dict[str, Any]:
    return PendingView(gate=gate, node=node, when="before", step=3, role="manager", agent=agent,
                       requested_at=datetime(2026, 12, 1, tzinfo=UTC),
                       expires_at=datetime(2099, 1, 1, tzinfo=UTC),
                       proposal={"amount_cents": "500"}).model_dump(mode="json")


FORGERIES = [
    (forged(agent="ghost"), "it names agent 'ghost', which this deployment does not have"),
    (forged(node="pay_everyone"), "agent 'refund' has no node 'pay_everyone'"),
    (forged(node="reason"), "agent 'refund' has no gate 'refund_review' at node 'reason'"),
    (forged(gate="cfo_review"), "agent 'refund' has no gate 'cfo_review' at node 'issue_refund'"),
    ({"gate": "refund_review", "node": 5}, "its pending request is malformed (node: "),
    ("not a request at all", "its pending request is malformed (memo: "),
]


async def test_a_forged_request_is_a_404_with_the_reason_never_a_500(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # Runs started on a queue no worker serves, each looking parked for a manager.
    fakes = [await client.start_workflow(
        "refund", id=new_id("forged"), task_queue=f"{task_queue}-nobody",
        memo={search.PENDING_MEMO: memo}, search_attributes=TypedSearchAttributes([
            SearchAttributePair(search.AGENT_NAME, "refund"),
            SearchAttributePair(search.AGENT_STATUS, "AWAITING_APPROVAL"),
            SearchAttributePair(search.AGENT_GATE_ROLE, "manager")]))
        for memo, _ in FORGERIES]
    try:
        async with worker(client, task_queue, db_path), inbox(client) as url:
            handle = await park_refund(client, task_queue)
            alice = await signed_in(url, "alice")
            try:
                listing = await alice.get("/")
                assert listing.status_code == 200 and handle.id in listing.text
                for fake, (_, reason) in zip(fakes, FORGERIES, strict=True):
                    assert fake.id not in listing.text
                    page = await alice.get(f"/runs/{fake.id}")
                    assert page.status_code == 404, page.text[-1500:]
                    assert reason in unescape(page.text), page.text[-1500:]
                    assert "is not a request this inbox can show" in page.text
                    posted = await alice.post(f"/runs/{fake.id}/decide", data={
                        "verdict": "approve", "gate": "refund_review", "request": "3",
                        "csrf": csrf_of(page.text)})
                    assert posted.status_code == 404 and reason in unescape(posted.text)
                    changes = await alice.get("/api/changes", params={"run": fake.id})
                    assert changes.status_code == 404 and reason in changes.text
                await approve(alice, handle.id, "1200")  # a genuine decision still works
            finally:
                await alice.aclose()
            assert (await handle.result()).amount_cents == 120000
    finally:
        for fake in fakes:
            await fake.terminate("test over")


async def test_an_unsigned_flag_set_by_the_starter_is_not_shown_as_true(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Any starter may set the TowerUnsignedDecisions search attribute; the page says a run
    accepts unsigned decisions only when the run itself reports it (its state)."""
    issuer(client)
    run = new_id("refund-flagged")
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handle: WorkflowHandle[Any, Any] = await client.start_workflow(
            RefundAgent.run, refund_request(client, run), id=run, task_queue=task_queue,
            search_attributes=TypedSearchAttributes([
                SearchAttributePair(search.UNSIGNED_DECISIONS, True)]))
        await wait_pending(handle)
        async with asyncio.timeout(30):
            while (await pending_of(client, run))[1] is None:
                await asyncio.sleep(0.1)
        described = await handle.describe()
        assert described.typed_search_attributes.get(search.UNSIGNED_DECISIONS) is True
        assert (await snapshot(handle))["unsigned_decisions"] is False
        alice = await signed_in(url, "alice")
        try:
            page = await alice.get(f"/runs/{run}")
            assert page.status_code == 200 and "Awaiting your decision" in page.text
            assert "UNSIGNED" not in page.text and 'id="unsigned"' not in page.text
            assert "UNSIGNED" not in (await alice.get("/")).text
            await approve(alice, run, "750.50")
        finally:
            await alice.aclose()
        assert (await handle.result()).amount_cents == 75050
