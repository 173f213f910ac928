"""Only genuine requests are listed (issue 24, item 2): a flood of forged "parked" runs —
look-alike refunds on a queue no worker of the deployment serves, fake workflow types on
its queue, forged or copied attestations — hides no real request from `tower pending` or
the inbox, a forged run's page is refused with the reason, and a genuine decision still
works afterwards with nothing paid for any fake."""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, refunds, wait_pending
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from tower.activities.attest import WORKER_KEY_FILE
from tower.activities.trust import read_trust
from tower.cli.cmd_approve import pending_requests
from tower.cli.inbox.visibility import UnreadableRequest, waiting_run, waiting_runs
from tower.client._pending import Deployment, NotGenuine, pending_of
from tower.client.keys import new_key
from tower.contract import search
from tower.contract.pending import PendingView
from tower.contract.trust import AttestClaims
from tower.core.signing import ATTEST_TYPE, sign
from workflows.refund import RefundAgent

# TOWER_PENDING_FORGED=10000 measures the figure (printed with -s; not asserted).
FORGED = int(os.environ.get("TOWER_PENDING_FORGED", "1000"))
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


async def forge(client: Client, n: int, queue: str, evil: str, real: str | None,
                trust: Path) -> list[str]:
    """``n`` forged parked runs, every kind an attacker who may start workflows can make."""
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
            await client.start_workflow(wf_type, id=run, task_queue=on,
                                        memo={search.PENDING_MEMO: memo},
                                        search_attributes=PARKED)
        ids.append(run)

    await asyncio.gather(*(one(i) for i in range(n)))
    return ids


@pytest.mark.soak  # 1,000 forged runs (the figure): the soak tier
async def test_a_flood_of_forged_requests_hides_no_real_one(
    client: Client, task_queue: str, db_path: Path, trust: Path, scripted_worker: Any,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOWER_TASK_QUEUES", task_queue)
    deployment = Deployment(roster=read_trust(trust, client.namespace).roster,
                            agents=frozenset({"refund"}), queues=frozenset({task_queue}))
    async with scripted_worker():
        real = [new_id("refund-real") for _ in range(3)]
        handles = [await client.start_workflow(RefundAgent.run, refund_request(client, r),
                                               id=r, task_queue=task_queue) for r in real]
        for h in handles:
            await wait_pending(h)
        memo = (await (await handles[0].describe()).memo())[search.PENDING_MEMO]
        assert memo["attestation"] and memo["proposal_digest"].startswith("sha256:")
        fakes = await forge(client, FORGED, task_queue, f"{task_queue}-evil",
                            memo["attestation"], trust)
        async with asyncio.timeout(60 + FORGED / 50):  # visibility is eventually consistent
            query = (f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL' AND TaskQueue IN "
                     f"('{task_queue}', '{task_queue}-evil')")
            while (await client.count_workflows(query)).count < FORGED + 3:
                await asyncio.sleep(0.5)
        # Unverified, the first 50 are mostly fakes: the attack the issue describes.
        unverified = {w.run for w in await waiting_runs(client, ["manager"], limit=50)}
        assert len(unverified - set(real)) > 0
        started = time.monotonic()
        listed = {w.run for w in await waiting_runs(client, ["manager"], limit=200,
                                                    deployment=deployment)}
        print(f"verified listing among {FORGED} forged runs: "
              f"{time.monotonic() - started:.3f} s")
        assert listed == set(real)
        rows = await pending_requests(client, limit=50)  # `tower pending`
        assert {r["run"] for r in rows} == set(real)
        for fake in (fakes[0], fakes[1], fakes[2], fakes[3]):
            with pytest.raises(UnreadableRequest, match="not a genuine request"):
                await waiting_run(client, fake, deployment)
            with pytest.raises(NotGenuine):
                await pending_of(client, fake, deployment)
        # A genuine decision still works, and only it pays.
        info = await wait_pending(handles[0])
        reply = await decide(client, handles[0], info["pending"])
        assert reply["result"] == "approved"
        await handles[0].result()
        assert len(refunds(db_path)) == 1
        left = {w.run for w in await waiting_runs(client, ["manager"], deployment=deployment)}
        assert left == set(real[1:])
        for h in handles[1:]:
            await h.terminate("test over")
    await asyncio.gather(*(client.get_workflow_handle(f).terminate("test over")
                           for f in fakes))
