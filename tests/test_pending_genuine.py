"""Only genuine requests are listed (issue 24, item 2): a flood of forged "parked" runs —
look-alike refunds on a queue no worker of the deployment serves, fake workflow types on
its queue, forged or copied attestations — hides no real request from `tower pending` or
the inbox, a forged run's page is refused with the reason, and a genuine decision still
works afterwards with nothing paid for any fake. 300 forged runs in the default suite (more
than any listing's page); 10,000, the issue's figure, in the ``soak`` tier (`pytest -m
soak`), which records the inbox list page's time."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, refunds, wait_pending
from inboxkit import inbox, issuer, signed_in
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.trust import WORKER_KEY_FILE, read_trust
from tower.cli.approvals import pending_requests
from tower.cli.inbox.visibility import waiting_runs
from tower.client._pending import Deployment, NotGenuine, pending_of
from tower.client.keys import new_key
from tower.contract import search
from tower.contract.pending import PendingView
from tower.contract.trust import AttestClaims
from tower.core.signing import ATTEST_TYPE, sign
from workflows.refund import RefundAgent

DIGEST = "sha256:" + "ab" * 32


def forged_view(run: str, attestation: str = "", **claims: Any) -> dict[str, Any]:
    return PendingView(gate="refund_review", node="issue_refund", when="before", step=4,
                       role="manager", requested_at=datetime(2026, 12, 1, tzinfo=UTC),
                       expires_at=datetime(2099, 1, 1, tzinfo=UTC), agent="refund",
                       proposal={"amount_cents": "500"}, proposal_digest=DIGEST,
                       attestation=attestation).model_dump(mode="json")


def attestation(tenant: str, run: str, queue: str, key: dict[str, Any]) -> str:
    claims = AttestClaims(tenant=tenant, run=run, run_id="r", gate="refund_review", step=4,
                          agent="refund", task_queue=queue, proposal=DIGEST, jti=run,
                          iat=int(time.time()), exp=int(time.time()) + 86400)
    return sign(claims, key, typ=ATTEST_TYPE)


PARKED = TypedSearchAttributes([
    SearchAttributePair(search.AGENT_STATUS, "AWAITING_APPROVAL"),
    SearchAttributePair(search.AGENT_GATE_ROLE, "manager"),
    SearchAttributePair(search.AGENT_NAME, "refund"),
    SearchAttributePair(search.AGENT_NODE, "issue_refund")])


async def retrying(call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()``, again after a pause whenever the server says it is too busy (its RPS
    limits): what an attacker's script does to get every start in."""
    for attempt in itertools.count():
        try:
            return await call()
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE):
                raise
            await asyncio.sleep(min(5.0, 0.2 * 2 ** min(attempt, 5)))
    raise AssertionError("unreachable")


async def forge(client: Client, n: int, queue: str, evil: str, real: str | None,
                trust: Path) -> list[str]:
    """``n`` forged parked runs, every kind an attacker who may start workflows can make:
    plain starts with a memo and search attributes, 50 at a time, retried when throttled."""
    worker_kid = json.loads((trust / client.namespace / WORKER_KEY_FILE).read_text())["kid"]
    key = {**new_key(), "kid": worker_kid}  # the attacker's own key under the worker's kid
    tenant, ids = client.namespace, []
    sem = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        run = new_id(f"fake-{i}")
        kind = i % 4
        if kind == 0:  # a look-alike refund on a queue no worker of ours serves
            memo, wf_type, on = forged_view(run), "refund", evil
        elif kind == 1:  # attested with the attacker's own key, naming our queue
            memo = forged_view(run, attestation(tenant, run, queue, key))
            wf_type, on = "refund", evil
        elif kind == 2:  # a type no agent has, on our own queue (our worker cannot run it)
            memo, wf_type, on = forged_view(run), "refund_", queue
        else:  # a real run's attestation, copied
            memo, wf_type, on = forged_view(run, real or ""), "refund", evil
        async with sem:
            await retrying(lambda: client.start_workflow(
                wf_type, id=run, task_queue=on, memo={search.PENDING_MEMO: memo},
                search_attributes=PARKED))
        ids.append(run)

    await asyncio.gather(*(one(i) for i in range(n)))
    return ids


async def end_all(client: Client, runs: list[str]) -> None:
    sem = asyncio.Semaphore(50)

    async def end(run: str) -> None:
        async with sem:
            await retrying(lambda: client.get_workflow_handle(run).terminate("test over"))

    await asyncio.gather(*(end(r) for r in runs))


async def a_flood_hides_no_real_request(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    forged: int
) -> float:
    """``forged`` forged parked runs beside 3 real refunds: the listings (the client's,
    `tower pending`'s, the inbox page's) show exactly the real ones, a forged run's page is
    a 404, and a genuine decision pays once. Returns the inbox list page's time (seconds)."""
    deployment = Deployment(roster=read_trust(trust, client.namespace).roster,
                            agents=frozenset({"refund"}), queues=frozenset({task_queue}))
    issuer(client)  # the inbox's key in the roster before the runs read it
    fakes: list[str] = []
    try:
        async with scripted_worker():
            real = [new_id("refund-real") for _ in range(3)]
            handles = [await client.start_workflow(
                RefundAgent.run, refund_request(client, r), id=r, task_queue=task_queue)
                for r in real]
            for h in handles:
                await wait_pending(h)
            memo = (await (await handles[0].describe()).memo())[search.PENDING_MEMO]
            assert memo["attestation"] and memo["proposal_digest"].startswith("sha256:")
            fakes = await forge(client, forged, task_queue, f"{task_queue}-evil",
                                memo["attestation"], trust)
            async with asyncio.timeout(60 + forged / 20):  # visibility is eventually consistent
                query = (f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL' AND TaskQueue IN "
                         f"('{task_queue}', '{task_queue}-evil')")
                while (await retrying(lambda: client.count_workflows(query))).count < forged + 3:
                    await asyncio.sleep(1)
            # Unverified, the first 50 are mostly fakes: the attack the issue describes.
            unverified = {w.run for w in await waiting_runs(client, ["manager"], limit=50)}
            assert len(unverified - set(real)) > 0
            listed = {w.run for w in await waiting_runs(client, ["manager"], limit=200,
                                                        deployment=deployment)}
            assert listed == set(real)
            rows = await pending_requests(client, limit=50)  # `tower pending`
            assert {r["run"] for r in rows} == set(real)
            for fake in fakes[:4]:  # one of each kind
                with pytest.raises(NotGenuine, match="not a genuine request"):
                    await pending_of(client, fake, deployment)
            async with inbox(client, deployment=deployment) as url:
                alice = await signed_in(url, "alice")
                try:
                    started = time.monotonic()
                    page = await alice.get("/")
                    seconds = time.monotonic() - started
                    assert page.status_code == 200
                    assert all(r in page.text for r in real)
                    assert not any(f in page.text for f in fakes)
                    for fake in fakes[:4]:
                        shown = await alice.get(f"/runs/{fake}")
                        assert shown.status_code == 404, shown.text[-1500:]
                        assert "not a genuine request" in unescape(shown.text)
                finally:
                    await alice.aclose()
            # A genuine decision still works, and only it pays.
            info = await wait_pending(handles[0])
            reply = await decide(client, handles[0], info["pending"])
            assert reply["result"] == "approved"
            await handles[0].result()
            assert refunds(db_path) == [("INV-2004", 120000)]
            left = {w.run for w in await waiting_runs(client, ["manager"],
                                                      deployment=deployment)}
            assert left == set(real[1:])
            for h in handles[1:]:
                await h.terminate("test over")
    finally:
        # The default's are ended so later tests on this server see none of them; 10,000 (the soak)
        # are left to the test's server, which ends with the session: ending them one at a
        # time took a large part of the 44 minutes.
        if len(fakes) <= 1_000:
            await end_all(client, fakes)
    return seconds


async def test_a_flood_of_forged_requests_hides_no_real_one(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWER_TASK_QUEUES", task_queue)
    seconds = await a_flood_hides_no_real_request(client, task_queue, db_path, trust,
                                                  scripted_worker, 300)
    print(f"the inbox's list page among 300 forged runs: {seconds:.3f} s")


@pytest.mark.soak
@pytest.mark.timeout(3600)  # 44 min at load 20 on 2 cores, when it ended the fakes too
async def test_ten_thousand_forged_requests_hide_no_real_one(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The issue's figure: 10,000 forged parked runs. The list page's time is recorded
    (the test's user properties, which reports show, and printed), never asserted."""
    monkeypatch.setenv("TOWER_TASK_QUEUES", task_queue)
    seconds = await a_flood_hides_no_real_request(client, task_queue, db_path, trust,
                                                  scripted_worker, 10_000)
    request.node.user_properties.append(
        ("inbox_list_page_seconds_among_10000_forged", round(seconds, 3)))
    print(f"the inbox's list page among 10,000 forged runs: {seconds:.3f} s")


async def test_a_closed_runs_attestation_on_a_new_execution_is_not_listed(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30, attack 3: after a genuine run closed, a raw client starts a new execution
    under the same workflow id (delayed, so no worker runs it) carrying the closed run's
    memo and attestation — as it was, and with the shown proposal rewritten to $5. Neither
    is listed by the client, `tower pending` or the inbox, and its page is a 404 saying why;
    nothing is paid."""
    monkeypatch.setenv("TOWER_TASK_QUEUES", task_queue)
    deployment = Deployment(roster=read_trust(trust, client.namespace).roster,
                            agents=frozenset({"refund"}), queues=frozenset({task_queue}))
    issuer(client)
    run = new_id("refund-replayed")
    async with scripted_worker():
        genuine = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                              id=run, task_queue=task_queue)
        await wait_pending(genuine)
        memo = (await (await genuine.describe()).memo())[search.PENDING_MEMO]
        assert memo["shown"]["proposal"]["amount_cents"] == 120000
        assert run in {w.run for w in await waiting_runs(client, ["manager"],
                                                         deployment=deployment)}
        await genuine.terminate("closed")
    five = json.loads(json.dumps(memo))
    five["shown"]["proposal"].update(amount_cents=500, amount="$5.00")
    five["proposal"] = {"amount_cents": "500", "amount": "$5.00"}
    for copied in (memo, five):
        forged = await client.start_workflow(
            "refund", {"message": "x"}, id=run, task_queue=task_queue,
            memo={search.PENDING_MEMO: copied}, search_attributes=PARKED,
            start_delay=timedelta(hours=1))
        assert forged.result_run_id != genuine.result_run_id
        async with asyncio.timeout(30):  # visibility is eventually consistent
            while not await client.count_workflows(f"WorkflowId = '{run}' AND "
                                                   "ExecutionStatus = 'Running'"):
                await asyncio.sleep(0.2)
        assert run not in {w.run for w in await waiting_runs(client, ["manager"],
                                                             deployment=deployment)}
        assert run not in {r["run"] for r in await pending_requests(client, limit=50)}
        with pytest.raises(NotGenuine, match="execution differ"):
            await pending_of(client, run, deployment)
        async with inbox(client, deployment=deployment) as url:
            alice = await signed_in(url, "alice")
            try:
                assert run not in (await alice.get("/")).text
                page = await alice.get(f"/runs/{run}")
                assert page.status_code == 404 and "not a genuine request" in unescape(page.text)
                assert "Approve" not in page.text
            finally:
                await alice.aclose()
        await forged.terminate("test over")
    assert refunds(db_path) == []
