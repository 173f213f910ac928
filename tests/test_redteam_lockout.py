"""Refusals cannot lock anyone out (issue 24, part 5), on a real dev server.

Junk decisions sent as an attacker would (concurrently, forged and garbage tokens) are all
refused, change nothing, and leave a genuine decision working at once afterwards: by update
(the validator's budget is per workflow task, and refused updates never reach the history,
so a budget keyed on history length alone stayed spent) and by signal.
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from gatekit import (
    decision,
    forged_key,
    new_id,
    recorded,
    refund_request,
    refunds,
    snapshot,
    tamper,
    task_failures,
    wait_pending,
)
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.model import ModelSettings
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = [pytest.mark.integration, pytest.mark.long]

JUNK = 1_000  # the figure
IN_FLIGHT = 10  # the server's cap on a run's concurrent updates (history.maxInFlightUpdates)
# How the server turns away an update that never reaches the run: over the in-flight cap,
# or aborted with the speculative task it rode in (the server drops those under a flood).
TURNED_AWAY = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE)


def junk(client: Client, run: str, pending: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """``n`` decisions an attacker can make: a key that only claims alice's key id, alice's
    claims with a garbage signature, a raised amount under her signature, plain garbage."""
    rng = random.Random(n)
    good = decision(client, run, pending)["token"]
    header, body, _ = good.split(".")
    kinds = [
        lambda: decision(client, run, pending, key=forged_key("alice")),
        lambda: {"token": f"{header}.{body}.{rng.randbytes(64).hex()[:86]}"},
        lambda: tamper(decision(client, run, pending), edits={"amount_cents": 99_999_900}),
        lambda: {"token": rng.randbytes(40).hex()},
        lambda: {"token": "a.b.c", "decision": "approve"},
    ]
    return [kinds[i % len(kinds)]() for i in range(n)]


async def refused_all(handle: Any, payloads: list[dict[str, Any]]) -> set[str]:
    """Send every update concurrently, as many at once as the server lets into a run (its
    in-flight cap), each again until the run itself has refused it; an update the server
    turned away (over the cap, or aborted with its speculative task) never reached the run.
    The reasons the run gave; an update it accepted fails the test."""
    reasons: set[str] = set()
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def send(payload: dict[str, Any]) -> None:
        while True:
            async with gate:
                try:
                    accepted = await handle.execute_update("decide", payload, result_type=dict)
                    raise AssertionError(f"junk accepted: {payload} -> {accepted}")
                except WorkflowUpdateFailedError as refused:
                    reasons.add(str(getattr(refused.cause, "message", refused.cause)))
                    return
                except RPCError as turned_away:
                    assert turned_away.status in TURNED_AWAY, turned_away
            await asyncio.sleep(0.05)

    await asyncio.gather(*(send(p) for p in payloads))
    return reasons


@pytest.mark.soak  # JUNK (the figure): the soak tier
async def test_a_thousand_junk_updates_then_a_genuine_decision_is_accepted_at_once(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """1,000 junk ``decide`` updates, concurrently: every one refused, nothing recorded,
    nothing paid; then alice's decision is accepted at once and the refund paid once."""
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        run = new_id("refund")
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        info = await wait_pending(handle)
        state, events = await snapshot(handle), await recorded(handle)
        reasons = await refused_all(handle, junk(client, run, info["pending"], JUNK))
        assert not any("unverified" in r for r in reasons), reasons
        assert await snapshot(handle) == state and await recorded(handle) == events
        assert refunds(db_path) == []
        # At once: the first time it is sent, with nothing else having reached the run.
        ok = decision(client, run, info["pending"])
        out = await handle.execute_update("decide", ok, result_type=dict)
        final = await handle.result()
        assert task_failures(await handle.fetch_history()) == []
    assert out["result"] == "approved" and final.status == "DONE"
    assert [(a.status, a.decision and a.decision.approver) for a in final.approvals] == [
        ("approved", "alice")]
    assert refunds(db_path) == [("INV-2004", 120000)]


@pytest.mark.soak  # JUNK (the figure): the soak tier
async def test_a_thousand_junk_decision_signals_then_a_genuine_one_is_accepted(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """The signal path: 1,000 junk ``decision`` signals at once, to a refund whose worker
    runs. Each is refused into the audit trail (the run carries over on the way: refusals.py);
    nothing is paid and the state is unchanged; then alice's decision, sent as a signal,
    is accepted and the refund paid once. (Signals move the history, so their per-task
    budget is fresh in the next task; one task's flood is the next test.)"""
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        run = new_id("refund")
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        info = await wait_pending(handle)
        state = await snapshot(handle)
        # The worker's plugin froze what this (long-lived) process had loaded, so the task
        # holding the flood is not stretched past 2 s by full collections (heap.py).
        assert gc.get_freeze_count() > 0
        sent = await asyncio.gather(*(handle.signal("decision", bad) for bad in
                                      junk(client, run, info["pending"], JUNK)),
                                    return_exceptions=True)
        # The server may refuse one that arrives as a run carries over: it reached no run.
        assert all(isinstance(e, RPCError) and "closing" in e.message
                   for e in filter(None, sent)), [e for e in sent if e][:3]
        latest = client.get_workflow_handle(run)
        refused = 0
        async with asyncio.timeout(120):  # until every junk signal that got in was judged
            while refused < JUNK - sum(1 for e in sent if e):
                refused = await refused_in_chain(client, run)
                await asyncio.sleep(0.5)
        assert refunds(db_path) == []
        after = await snapshot(latest)
        assert {k: after[k] for k in ("status", "node", "step", "approvals")} == {
            k: state[k] for k in ("status", "node", "step", "approvals")}
        await latest.signal("decision", decision(client, run, info["pending"]))
        final = await latest.result()
        assert [f async for f in chain_failures(client, run)] == []  # no deadlock, no retry
    assert final["status"] == "DONE"
    assert [(a["status"], a["decision"]["approver"]) for a in final["approvals"]] == [
        ("approved", "alice")]
    assert refunds(db_path) == [("INV-2004", 120000)]


async def chain_failures(client: Client, run: str) -> AsyncIterator[str]:
    """The workflow tasks the worker failed, in every run under the workflow id ``run``."""
    async for listed in client.list_workflows(f"WorkflowId = '{run}'"):
        history = await client.get_workflow_handle(run, run_id=listed.run_id).fetch_history()
        for failure in task_failures(history):
            yield failure


async def refused_in_chain(client: Client, run: str) -> int:
    """Refusals counted by every run under the workflow id ``run`` so far."""
    total = 0
    async for listed in client.list_workflows(f"WorkflowId = '{run}'"):
        handle = client.get_workflow_handle(run, run_id=listed.run_id)
        total += (await handle.query("approvals", result_type=dict))["refused_total"]
    return total


# The figure, the server's cap per run, in the soak tier; the default tier's 200
# still reach the run in one task and are judged over four tasks after it.
@pytest.mark.parametrize("signals", [200, pytest.param(JUNK, marks=pytest.mark.soak)])
async def test_a_genuine_signal_in_the_same_task_as_a_thousand_forged_ones_is_accepted(
    client: Client, task_queue: str, db_path: Path, signals: int
) -> None:
    """The worst case for signals: the worker is down while 999 junk decisions and then
    alice's arrive, so all 1,000 (the server's cap per run) reach the run in one workflow
    task. A task checks at most 50 signatures; the rest are held and judged, in order, in
    the tasks that follow, never refused "unverified". Every junk one is refused, nothing
    is paid for them, no task fails, and alice's is accepted: the refund is paid once."""
    run = new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        info = await wait_pending(handle)
    payloads = junk(client, run, info["pending"], signals - 1)
    for start in range(0, len(payloads), 500):
        await asyncio.gather(*(handle.signal("decision", p) for p in payloads[start:start + 500]))
    await handle.signal("decision", decision(client, run, info["pending"]))
    assert refunds(db_path) == []
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        final = await client.get_workflow_handle(run).result()
        assert [f async for f in chain_failures(client, run)] == []  # no deadlock, no retry
        assert await refused_in_chain(client, run) == signals - 1
        audit = await handle.query("approvals", result_type=dict)
        assert not any("unverified" in r["reason"] for r in audit["refused"]), audit["refused"]
    assert final["status"] == "DONE"
    assert [(a["status"], a["decision"]["approver"]) for a in final["approvals"]] == [
        ("approved", "alice")]
    assert refunds(db_path) == [("INV-2004", 120000)]
