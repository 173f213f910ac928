"""Adding and revoking keys reaches runs already waiting at a gate, without restarting them:
at once when asked (the `refresh_trust` signal, or a decision the roster the run holds
refuses: the run reads it again once before it refuses), and within the policy's
`roster_refresh_seconds` otherwise."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, new_id, refund_request, refunds, roster_reads, wait_pending
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from tower.activities.model import ModelSettings
from tower.cli.trust_files import dev_trust, enrol, read_roster, write_roster
from tower.client import decide
from tower.client.keys import load_key, new_key
from tower.contract.decisions import Verdict
from tower.temporal._gate import REFRESH_GAP, ROSTER_RECHECKS
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long


def deployment(tmp_path: Path, client: Client, **policy: Any) -> tuple[Path, Path]:
    trust, config = tmp_path / "trust", tmp_path / "approvers"
    dev_trust(trust, client.namespace, config=config, **policy)
    return trust, config


async def parked(client: Client, task_queue: str) -> Any:
    run = new_id("refund")
    handle = await client.start_workflow(RefundAgent.run, refund_request(client, run), id=run,
                                         task_queue=task_queue)
    return handle, (await wait_pending(handle))


def revoke(trust: Path, tenant: str, name: str) -> None:
    roster = read_roster(trust, tenant)
    write_roster(trust, roster.model_copy(update={
        "members": [m for m in roster.members if m.name != name]}))


async def refreshed_after(handle: Any, before: str) -> None:
    async with asyncio.timeout(30):
        while (await handle.query("approvals", result_type=dict))["refreshed_at"] == before:
            await asyncio.sleep(0.1)


async def test_a_key_added_while_the_run_waits_decides_at_once(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    trust, config = deployment(tmp_path, client)
    monkeypatch.setenv("TOWER_CONFIG_DIR", str(config))
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, _ = await parked(client, task_queue)
        enrol(trust, client.namespace, "erin", config=config, roles=["manager"])
        # The run's snapshot does not know erin's key: it reads the roster again, by itself.
        out = await decide(client, handle.id, Verdict.APPROVE, approver="erin",
                                  role=None)
        state = await handle.result()
    assert out is not None and out.result == "approved"
    (record,) = state.approvals
    assert record.decision is not None and record.decision.approver == "erin"
    assert record.decision.kid == load_key("erin", config)["kid"]
    assert refunds(db_path) == [("INV-2004", 120000)]


async def test_a_role_granted_after_the_run_started_decides_unasked(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    """carol was a clerk when the run read its roster; made a manager since (`tower keys
    enrol carol --role manager`), her decision is taken without a `refresh_trust`."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        enrol(trust, client.namespace, "carol", config=config, roles=["manager"])
        carol = decision(client, handle.id, info["pending"], approver="carol",
                         key=load_key("carol", config))
        out = await handle.execute_update("decide", carol, result_type=dict)
        await handle.result()
    assert out["result"] == "approved" and refunds(db_path) == [("INV-2004", 120000)]


async def test_a_flood_of_unknown_key_ids_costs_a_bounded_number_of_roster_reads(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    """Each decision under an unknown key id waits for one roster read, which all of them
    share (at most one per REFRESH_GAP), then is refused with its code; nothing moves."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        before, started = await roster_reads(handle), time.monotonic()
        junk = [decision(client, handle.id, info["pending"], key=new_key(f"junk-{i}"))
                for i in range(8)]
        answers = await asyncio.gather(*(handle.execute_update("decide", j, result_type=dict)
                                         for j in junk), return_exceptions=True)
        elapsed, reads = time.monotonic() - started, await roster_reads(handle) - before
        assert all(isinstance(a, WorkflowUpdateFailedError) and "unknown key id 'junk-"
                   in str(a.cause) for a in answers), answers
        assert 1 <= reads <= 1 + elapsed / REFRESH_GAP.total_seconds(), (reads, elapsed)
        after = await handle.query("approvals", result_type=dict)
        assert [r["code"] for r in after["refused"]] == ["unknown_key"] * len(junk)
        assert after["pending"] == info["pending"] and after["waiting_for_roster"] == 0
        out = await handle.execute_update("decide", decision(
            client, handle.id, info["pending"], approver="bob", key=load_key("bob", config)),
            result_type=dict)
        await handle.result()
    assert out["result"] == "approved" and refunds(db_path) == [("INV-2004", 120000)]


async def test_forged_key_ids_past_the_recheck_bound_leave_nothing_in_the_history(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    """An update under an unknown key id waits in the run's history for a roster read; past
    ROSTER_RECHECKS of them the validator refuses the rest, so a flood neither grows the
    history nor spends the server's updates per run; the genuine decision still pays once."""
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)

        async def flood(count: int, tag: str) -> list[BaseException]:
            junk = [decision(client, handle.id, info["pending"], key=new_key(f"{tag}-{i}"))
                    for i in range(count)]
            answers: list[BaseException] = []
            for at in range(0, count, 5):  # under the server's in-flight updates per run (10)
                answers += await asyncio.gather(*(
                    handle.execute_update("decide", j, result_type=dict)
                    for j in junk[at:at + 5]), return_exceptions=True)
            return answers

        first = await flood(ROSTER_RECHECKS, "junk")
        accepted = await updates_in_history(handle)
        later = await flood(10, "more")
        assert all(isinstance(a, WorkflowUpdateFailedError) for a in first + later)
        assert all(isinstance(a, WorkflowUpdateFailedError) and
                   f"re-read its roster for {ROSTER_RECHECKS} decisions" in str(a.cause)
                   for a in later), later
        assert accepted == ROSTER_RECHECKS and await updates_in_history(handle) == accepted
        after = await handle.query("approvals", result_type=dict)
        assert after["pending"] == info["pending"] and refunds(db_path) == []
        out = await handle.execute_update("decide", decision(
            client, handle.id, info["pending"], approver="bob", key=load_key("bob", config)),
            result_type=dict)
        await handle.result()
    assert out["result"] == "approved" and refunds(db_path) == [("INV-2004", 120000)]


async def updates_in_history(handle: WorkflowHandle) -> int:
    history = await handle.fetch_history()
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)


async def test_a_revoked_key_stops_working_when_the_run_refreshes(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    trust, config = deployment(tmp_path, client)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        revoke(trust, client.namespace, "alice")
        await handle.signal("refresh_trust")  # what `tower keys push` would send
        await refreshed_after(handle, info["refreshed_at"])
        alice = decision(client, handle.id, info["pending"], key=load_key("alice", config))
        try:
            await handle.execute_update("decide", alice, result_type=dict)
            raise AssertionError("a revoked key decided")
        except WorkflowUpdateFailedError as exc:
            assert "unknown key id" in str(exc.cause)
        bob = decision(client, handle.id, info["pending"], approver="bob",
                       key=load_key("bob", config))
        out = await handle.execute_update("decide", bob, result_type=dict)
        await handle.result()
    assert out["result"] == "approved"


async def test_without_being_asked_the_run_refreshes_on_the_policys_timer(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    trust, config = deployment(tmp_path, client, roster_refresh_seconds=1)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings(), trust_dir=trust):
        handle, info = await parked(client, task_queue)
        revoke(trust, client.namespace, "alice")
        # Two refreshes later (a second each), one of them began after the revocation.
        await refreshed_after(handle, info["refreshed_at"])
        await refreshed_after(handle, (await handle.query("approvals",
                                                          result_type=dict))["refreshed_at"])
        alice = decision(client, handle.id, info["pending"], key=load_key("alice", config))
        try:
            await handle.execute_update("decide", alice, result_type=dict)
            raise AssertionError("a revoked key decided")
        except WorkflowUpdateFailedError as exc:
            assert "unknown key id" in str(exc.cause)
        state = await handle.query("state", result_type=dict)
        await handle.terminate("test over")
    assert state["status"] == "AWAITING_APPROVAL" and refunds(db_path) == []


async def test_a_run_outlives_failed_attempts_to_load_its_roster(
    client: Client, task_queue: str, db_path: Path, monkeypatch: Any
) -> None:
    """The roster's loading fails three times (a worker lost mid-read, a flaky mount): the
    run keeps trying within its deadline and goes on, instead of failing before its first
    step (the randomized checker's soak met this with workers SIGKILLed every few seconds)."""
    import tower.activities.trust

    real, failures = tower.activities.trust.read_trust, list[str]()

    def flaky(root: Path, tenant: str) -> Any:
        if len(failures) < 3:
            failures.append(tenant)
            raise OSError("the trust directory is not readable right now")
        return real(root, tenant)

    monkeypatch.setattr(tower.activities.trust, "read_trust", flaky)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(
            RefundAgent.run, refund_request(client, "x", message="Refund $49 on invoice INV-2001"),
            id=new_id("flaky-trust"), task_queue=task_queue)
        state = await handle.result()
    assert len(failures) == 3
    assert state.status == "DONE" and refunds(db_path) == [("INV-2001", 4900)]
