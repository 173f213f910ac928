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
from temporalio import activity
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.activities.trust import Trust
from tower.cli.approvals import deployment
from tower.client import pending
from tower.client._pending import pending_of
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long

SLOW = 5.0  # seconds the attestation takes: the window the readers look in


async def test_a_request_waiting_for_its_attestation_is_not_shown_as_forged(
        client: Client, task_queue: str, db_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    attesting, answered = threading.Event(), threading.Event()
    key_for = Trust.key_for

    def slow_key_for(self: Trust, tenant: str) -> dict[str, Any] | None:
        if not activity.in_activity():  # the worker's check of its key as it starts
            return key_for(self, tenant)
        attesting.set()
        time.sleep(SLOW)  # the activity's own thread: the workflow waits for its answer
        answered.set()
        return key_for(self, tenant)

    monkeypatch.setattr(Trust, "key_for", slow_key_for)
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
            looks = 0
            while True:
                # One look at every surface; it counts only if the attestation was still
                # on its way when the look ended (else the request may be published).
                listed = [w.run for w in await pending(client, agent="refund")]
                genuine = [w.run for w in await pending(
                    client, deployment=deployment(client.namespace))]
                status, view = await pending_of(client, run, deployment(client.namespace))
                page = await alice.get(f"/runs/{run}")
                approvals = await handle.query("approvals", result_type=dict)
                # So a client that follows the run (`tower run`) does not stop at the gate
                # before the request is there to decide.
                status_query = await handle.query("status", result_type=str)
                if answered.is_set():
                    break
                looks += 1
                assert run not in listed and run not in genuine, "listed before its attestation"
                assert view is None, view
                assert "genuine" not in page.text and "forged" not in page.text, page.text
                assert not stream.done(), stream.result()  # waits, or streams its steps
                assert approvals["pending"] is None and not approvals["records"], approvals
                assert status_query == "RUNNING"
                await asyncio.sleep(0.2)
            assert looks >= 1
            # Once attested: listed, genuine, shown, and the stream that waited streams.
            info = await wait_pending(handle)
            assert info["pending"] is not None and info["proposal_digest"]
            assert [w.run for w in await pending(
                client, deployment=deployment(client.namespace))].count(run) == 1
            async with asyncio.timeout(10):  # the inbox reads visibility once a second
                while "Approve" not in (page := await alice.get(f"/runs/{run}")).text:
                    await asyncio.sleep(0.2)
            assert page.status_code == 200
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
