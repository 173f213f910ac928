"""A request is published together with its attestation (issue 41): while the worker's
attestation of a new request is still on its way, no reader sees the request, so none sees
a genuine request that looks forged. The attestation is slowed for real (its activity
sleeps), and the list, the page, the stream and the approvals query are read in that window.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from gatekit import new_id, refund_request, wait_pending
from inboxkit import inbox, issuer, signed_in
from temporalio.client import Client

from tower.activities.attest import Attester
from tower.activities.model import ModelSettings
from tower.cli.approvals import deployment
from tower.cli.inbox.visibility import waiting_run
from tower.client import pending
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long

SLOW = 4.0  # seconds the attestation takes: the window the readers look in


async def test_a_request_waiting_for_its_attestation_is_not_shown_as_forged(
        client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    attesting, answered = threading.Event(), threading.Event()
    key_for = Attester.key_for

    def slow_key_for(self: Attester, tenant: str) -> dict[str, Any] | None:
        attesting.set()
        time.sleep(SLOW)  # the activity's own thread: the workflow waits for its answer
        answered.set()
        return key_for(self, tenant)

    monkeypatch.setattr(Attester, "key_for", slow_key_for)
    # The worker's stream store (beside its tools' database), which the inbox reads too.
    monkeypatch.setenv("TOWER_STREAMS", str(db_path.with_name("streams.sqlite")))
    issuer(client)
    run = new_id("refund-attesting")
    worker = build_worker(client, task_queue=task_queue, db_path=db_path,
                          models=ModelSettings())
    async with worker, inbox(client) as url:
        alice = await signed_in(url, "alice")
        stream: asyncio.Task[bool] | None = None
        try:
            handle = await client.start_workflow(
                RefundAgent.run, refund_request(client, run), id=run, task_queue=task_queue)
            async with asyncio.timeout(30):
                while not attesting.is_set():
                    await asyncio.sleep(0.05)
            # A stream opened as the run parks: waits for the run, or follows its steps.
            stream = asyncio.create_task(_gate_opened(alice, run, answered))
            ends = time.monotonic() + SLOW - 1.5
            looks = 0
            while time.monotonic() < ends:
                looks += 1
                listed = [w.run for w in await pending(client, agent="refund")]
                assert run not in listed, "listed before its attestation"
                assert run not in [w.run for w in await pending(
                    client, deployment=deployment(client.namespace))]
                status, view = await waiting_run(client, run, deployment(client.namespace))
                assert view is None, view
                page = await alice.get(f"/runs/{run}")
                assert "genuine" not in page.text and "forged" not in page.text, page.text
                assert not stream.done(), stream.result()  # waits, or streams its steps
                approvals = await handle.query("approvals", result_type=dict)
                assert approvals["pending"] is None and not approvals["records"], approvals
                # So a client that follows the run (`tower run`) does not stop at the gate
                # before the request is there to decide.
                assert await handle.query("status", result_type=str) == "RUNNING"
                await asyncio.sleep(0.2)
            assert looks >= 3
            # Once attested: listed, genuine, shown, and the stream that waited streams.
            info = await wait_pending(handle)
            assert info["pending"] is not None and info["proposal_digest"]
            assert [w.run for w in await pending(
                client, deployment=deployment(client.namespace))].count(run) == 1
            page = await alice.get(f"/runs/{run}")
            assert page.status_code == 200 and "Approve" in page.text, page.text[:2000]
            assert await asyncio.wait_for(stream, 30), "the gate opened before its attestation"
            await handle.terminate("test over")
        finally:
            if stream is not None:
                stream.cancel()
            await alice.aclose()


async def _gate_opened(session: httpx.AsyncClient, run: str, answered: threading.Event
                       ) -> bool:
    """Follow the run's stream until its gate opens: whether the attestation was back."""
    async with session.stream("GET", f"/api/runs/{run}/stream?wait=30") as live:
        if live.status_code != 200:
            await live.aread()
            raise AssertionError(f"stream answered {live.status_code}: {live.text}")
        async for line in live.aiter_lines():
            if line == "event: gate_opened":
                return answered.is_set()
    raise AssertionError("the stream ended without the gate opening")
