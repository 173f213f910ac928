"""The attacks of issue 12, performed against a real dev server: each one fails, and the run's
state and the tools' database are unchanged afterwards.

The attacker can read every run's history and the Web UI, start runs with any input, send any
signal or update, and holds a roster key of their own (carol, a clerk; or another tenant's).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from gatekit import (
    decision,
    forged_key,
    new_id,
    refund_request,
    refunds,
    snapshot,
    task_failures,
    wait_pending,
)
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from tower.activities.model import ModelSettings
from tower.cli.trust_files import enrol, read_roster, write_roster
from tower.client.keys import load_key, new_key
from tower.contract.decisions import GateRecord, proposal_digest
from tower.core.signing import decision_claims
from tower.temporal import TowerPlugin
from tower.temporal._gate import CARRY_AFTER_SIGNALS, MAX_SIGNALS_PER_RUN
from worker import build_worker
from workflows.refund import RefundAgent

pytestmark = [pytest.mark.integration, pytest.mark.long]


def readable(history_json: str) -> str:
    """Everything a reader of the history sees, payloads decoded (they are base64 in it)."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "data" and isinstance(value, str):
                    parts.append(base64.b64decode(value).decode("utf-8", "replace"))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, str):
            parts.append(node)

    walk(json.loads(history_json))
    return "\n".join(parts)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def refused_update(handle: Any, payload: dict[str, Any]) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as info:
        await handle.execute_update("decide", payload, result_type=dict)
    return str(getattr(info.value.cause, "message", info.value.cause))


class Parked:
    """A $1,200 refund waiting at its gate, and how it looked before the attack."""

    def __init__(self, handle: Any, info: dict[str, Any], state: dict[str, Any]) -> None:
        self.handle, self.info, self.state = handle, info, state
        self.pending = info["pending"]

    async def unchanged(self, db_path: Path) -> None:
        assert await snapshot(self.handle) == self.state
        assert refunds(db_path) == []


async def park(client: Client, task_queue: str) -> Parked:
    run = new_id("refund")
    handle = await client.start_workflow(RefundAgent.run, refund_request(client, run), id=run,
                                         task_queue=task_queue)
    info = await wait_pending(handle)
    return Parked(handle, info, await snapshot(handle))


def worker(client: Client, task_queue: str, db_path: Path, **kw: Any) -> Any:
    return build_worker(client, task_queue=task_queue, db_path=db_path,
                        models=ModelSettings(), **kw)


async def test_what_the_history_holds_cannot_sign(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """Read the whole history: no private key is in it, and what is in it (public keys,
    digests, ids) signs nothing — not as an HMAC secret, not as a key of its own."""
    async with worker(client, task_queue, db_path):
        run = await park(client, task_queue)
        history = readable((await run.handle.fetch_history()).to_json())
        x = load_key("alice")["x"]
        assert x in history  # the roster snapshot: alice's public key is readable...
        for name in ("alice", "bob", "carol", "dana"):
            assert load_key(name)["d"] not in history  # ...no approver's private key is
        assert '"d":' not in history.replace(" ", "")
        claims = decision_claims(tenant=client.namespace, run=run.handle.id,
                                 run_id=run.pending["run_id"], gate="refund_review",
                                 request=run.pending["step"],
                                 proposal=proposal_digest(GateRecord.model_validate(run.pending)),
                                 verdict="approve", sub="alice", role="manager",
                                 jti="d-hmac", now=time.time())
        header = b64(json.dumps({"alg": "HS256", "kid": load_key("alice")["kid"],
                                 "typ": "tower-decision+jwt"}).encode())
        body = b64(claims.model_dump_json().encode())
        mac = hmac.new(x.encode(), f"{header}.{body}".encode(), hashlib.sha256).digest()
        forged = {"token": f"{header}.{body}.{b64(mac)}"}
        assert "not accepted" in await refused_update(run.handle, forged)
        await run.handle.signal("decision", forged)
        await run.unchanged(db_path)
        await run.handle.terminate("test over")


async def test_a_role_the_roster_does_not_grant_and_another_tenants_key(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        run = await park(client, task_queue)
        p, rid = run.pending, run.handle.id
        carol_as_manager = decision(client, rid, p, approver="carol", role="manager")
        assert "carol does not hold role 'manager'" in await refused_update(
            run.handle, carol_as_manager)
        carol_as_alice = decision(client, rid, p, approver="alice", key=load_key("carol"))
        assert "may not sign as 'alice'" in await refused_update(run.handle, carol_as_alice)
        # tenant-a's roster holds a manager key the default tenant never enrolled.
        trust = Path(os.environ["TOWER_TRUST_DIR"])
        config = trust.parent / "tenant-a-approvers"
        enrol(trust, "tenant-a", "frank", config=config, roles=["manager"])
        foreign = decision(client, rid, p, approver="frank", key=load_key("frank", config))
        assert "unknown key id" in await refused_update(run.handle, foreign)
        assert "invalid signature" in await refused_update(
            run.handle, decision(client, rid, p, key=forged_key("alice")))
        await run.unchanged(db_path)
        await run.handle.terminate("test over")


async def test_a_revoked_key(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    from tower.cli.trust_files import dev_trust

    trust, config = tmp_path / "trust", tmp_path / "keys"
    dev_trust(trust, client.namespace, config=config)
    async with worker(client, task_queue, db_path, trust_dir=trust):
        run = await park(client, task_queue)
        roster = read_roster(trust, client.namespace)
        write_roster(trust, roster.model_copy(update={
            "members": [m for m in roster.members if m.name != "alice"]}))
        await run.handle.signal("refresh_trust")
        while (await run.handle.query("approvals", result_type=dict))["refreshed_at"] == \
                run.info["refreshed_at"]:
            await asyncio.sleep(0.1)
        alice = decision(client, run.handle.id, run.pending, key=load_key("alice", config))
        assert "unknown key id" in await refused_update(run.handle, alice)
        await run.unchanged(db_path)
        await run.handle.terminate("test over")


async def test_unsigned_raw_update_and_signal(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        run = await park(client, task_queue)
        bare = decision(client, run.handle.id, run.pending, unsigned=True)
        assert "unsigned decision refused" in await refused_update(run.handle, bare)
        await run.handle.signal("decision", bare)
        old_format = {"decision_id": "d-old", "tenant": client.namespace,
                      "run": run.handle.id, "gate": "refund_review", "decision": "approve",
                      "approver": "mallory", "role": "manager",
                      "expires_at": run.pending["expires_at"]}
        assert "malformed decision" in await refused_update(run.handle, old_format)
        await run.handle.signal("decision", old_format)
        audit = await run.handle.query("approvals", result_type=dict)
        assert audit["refused_total"] == 2 and audit["unsigned_allowed"] is False
        await run.unchanged(db_path)
        await run.handle.terminate("test over")


async def test_a_replayed_or_redirected_decision(
    client: Client, task_queue: str, db_path: Path
) -> None:
    async with worker(client, task_queue, db_path):
        run = await park(client, task_queue)
        other = await park(client, task_queue)
        p, rid = run.pending, run.handle.id
        for_other = decision(client, other.handle.id, other.pending)
        assert f"is for run {other.handle.id!r}" in await refused_update(run.handle, for_other)
        earlier = decision(client, rid, p, request=p["step"] - 1)
        assert "answers the request opened at step" in await refused_update(run.handle,
                                                                             earlier)
        stale = decision(client, rid, p, now=time.time() - 3600)
        assert "expired" in await refused_update(run.handle, stale)
        await run.unchanged(db_path)
        await other.unchanged(db_path)
        # The real one decides once; the same token again changes nothing more.
        ok = decision(client, rid, p, decision_id="d-once")
        first = await run.handle.execute_update("decide", ok, result_type=dict)
        again = await run.handle.execute_update("decide", ok, result_type=dict)
        await run.handle.result()
        await other.handle.terminate("test over")
    assert first["result"] == "approved" and again["duplicate"]
    assert refunds(db_path) == [("INV-2004", 120000)]


@pytest.mark.parametrize("request_json, reason", [
    ({"message": "Please refund $9,000 on invoice INV-3005", "limit_cents": 100_000_000},
     "would loosen the tenant's policy"),
    ({"message": "Please refund $9,000 on invoice INV-3005",
      "approvals": {"allow_unsigned": True}}, "Extra inputs are not permitted"),
    ({"message": 42}, "message"),
    ({"message": "refund", "unsigned": True}, "Extra inputs are not permitted"),
    # A forged "continued" run: a state already past the gate, handed in by a client.
    ({"message": "refund", "carry": {"run_id": "forged", "log": {}, "state": {
        "limit_cents": 0, "review_timeout_seconds": 60, "node": "issue_refund", "step": 3,
        "invoice_id": "INV-3005", "amount_cents": 900_000, "refund_reason": "forged"}}},
     "accepted only from the run's own continue-as-new"),
])
async def test_a_raw_start_that_sets_policy_or_is_malformed_fails_at_once(
    client: Client, task_queue: str, db_path: Path, request_json: dict[str, Any], reason: str
) -> None:
    """A raw client start (no `tower run` check in front): FAILED at once, with the
    reason; nothing paid."""
    async with worker(client, task_queue, db_path):
        handle = await client.start_workflow("refund", request_json, id=new_id("raw"),
                                             task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
        history = await handle.fetch_history()
    assert reason in str(info.value.cause)
    failed_tasks = [e for e in history.events if e.HasField(
        "workflow_task_failed_event_attributes")]
    assert failed_tasks == []  # failed the run, not a workflow task retrying forever
    assert refunds(db_path) == []


async def test_export_never_writes_outside_the_folder_it_was_given(
    client: Client, task_queue: str, db_path: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    from tower.cli.cli import main
    from tower.temporal.replay import load
    from workflows.account import AccountAgent, AccountRequest

    folder, tag = tmp_path / "exports", new_id("x")
    folder.mkdir()
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    monkeypatch.chdir(folder)
    async with worker(client, task_queue, db_path):
        for run in (f"../{tag}", f"{tmp_path}/{tag}-abs", f"..%2F{tag}-pct"):
            handle = await client.start_workflow(
                AccountAgent.run, AccountRequest(question="Check ACC-1001"), id=run,
                task_queue=task_queue)
            await handle.result()
            code = await asyncio.to_thread(main, ["history", "export", run, "-o", str(folder)])
            assert code == 0
            code = await asyncio.to_thread(main, ["history", "export", run])  # into the cwd
            assert code == 0
    written = sorted(p.name for p in folder.iterdir())
    assert len(written) == 3 and all("/" not in n and not n.startswith(".") for n in written)
    assert [p for p in tmp_path.parent.rglob(f"*{tag}*") if folder not in p.parents] == []
    # Each file still names its run: replay reads the workflow id back from the name.
    assert sorted(h.workflow_id for _, h in load([folder])) == sorted(
        [f"../{tag}", f"{tmp_path}/{tag}-abs", f"..%2F{tag}-pct"])


def signing_material(text: str) -> list[str]:
    """Anything in ``text`` that could sign: a private JWK's ``d``, or a 64-hex ``key`` (an
    HMAC key, as runs before signed decisions carried in their input)."""
    found = re.findall(r'"d"\s*:\s*"[A-Za-z0-9_-]{43}"', text)
    found += re.findall(r'"key"\s*:\s*"[0-9a-f]{64}"', text)
    return found


def test_recorded_histories_hold_nothing_that_signs() -> None:
    histories = Path(__file__).parent / "histories"
    recorded = list(histories.rglob("*.json"))
    assert len(recorded) > 10
    for path in recorded:
        assert signing_material(readable(path.read_text())) == [], path.name
    # The scan finds what it looks for: a private key and an HMAC key written into one.
    leaked = readable(recorded[0].read_text()) + json.dumps(
        {"jwk": new_key("leak-1"), "approvals": {"key": "ab" * 32}})
    assert len(signing_material(leaked)) == 2


async def test_signals_the_run_cannot_read_are_refused_and_counted(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """A signal with no input, two inputs, an input that is not an object, or a name the run
    does not know: each is refused into the audit trail (none is dropped unseen, none fails
    the workflow task and stalls the run), and the run still takes a real decision."""
    async with worker(client, task_queue, db_path):
        run = await park(client, task_queue)
        await run.handle.signal("decision", args=[])  # `temporal workflow signal` sans --input
        await run.handle.signal("decision", args=[{"token": "x"}, {"token": "y"}])
        await run.handle.signal("decision", "approve")
        await run.handle.signal("decision", 42)
        await run.handle.signal("approve", {"token": "x"})
        await run.handle.signal("refresh_trust", "anything")  # no authority; inputs ignored
        async with asyncio.timeout(30):
            while (audit := await run.handle.query("approvals", result_type=dict))[
                    "refused_total"] < 5:
                await asyncio.sleep(0.1)
        assert [r["reason"] for r in audit["refused"]] == [
            "malformed decision: a decision signal carries one JSON object, this one "
            "carried 0 inputs",
            "malformed decision: a decision signal carries one JSON object, this one "
            "carried 2 inputs",
            "malformed decision: the signal's input is not a JSON object",
            "malformed decision: the signal's input is not a JSON object",
            "unknown signal 'approve': nothing changed"]
        assert audit["refused_total"] == 5
        await run.unchanged(db_path)
        out = await run.handle.execute_update(
            "decide", decision(client, run.handle.id, run.pending), result_type=dict)
        assert out["result"] == "approved"
        await run.handle.result()
        assert task_failures(await run.handle.fetch_history()) == []
    assert refunds(db_path) == [("INV-2004", 120000)]


# The servers take at most MAX_SIGNALS_PER_RUN signals per run (dynamic config); a refund
# parked at its gate carries over once it has taken CARRY_AFTER_SIGNALS, and refusing a
# signal past the task's verify budget costs a counter and a tuple (refusals.py).
FLOOD = 10_000  # the figure
OVER_CAP = "exceeded workflow execution limit for signal events"  # the server's refusal
WARN_EVENTS, WARN_BYTES = 10_240, 10 * 1024 * 1024  # Temporal's history warning limits


@pytest.mark.soak  # 10,000 signals (the figure): the soak tier
async def test_a_flood_of_forged_signals_leaves_the_refund_able_to_complete(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """10,000 forged decisions by signal to a waiting refund whose worker is down: the worst
    case, as every signal the run takes lands in its next workflow task. The server takes
    1,000 (its per-run cap) and refuses the rest at the API, where they cost the run nothing.
    The run records and refuses each one it took, fails no task (the SDK's deadlock detector
    gives a task 2 s) and carries over, so the chain takes signals again. Then alice decides:
    the refund is paid once, every run of the chain under the warning limits."""
    async with worker(client, task_queue, db_path, max_cached_workflows=0):
        run = await park(client, task_queue)  # (no cache: nothing sticks to this worker)
    forged = decision(client, run.handle.id, run.pending, key=forged_key("alice"))
    over_cap = await flood(run.handle, forged, FLOOD)
    async with worker(client, task_queue, db_path):
        latest = await carried_over(client, run.handle)
        await latest.signal("decision", forged)  # the next run takes signals: refused
        info = await wait_pending(latest, timeout=60)  # (it has read its roster)
        assert refunds(db_path) == [] and info["pending"]["gate"] == "refund_review"
        ok = decision(client, run.handle.id, info["pending"])
        out = await latest.execute_update("decide", ok, result_type=dict)
        state = await latest.result()
        runs = await chain(client, run.handle, forged)  # (queries need the worker)
    assert out["result"] == "approved" and state["status"] == "DONE"
    assert refunds(db_path) == [("INV-2004", 120000)]  # once
    assert over_cap == FLOOD - MAX_SIGNALS_PER_RUN  # refused at the API...
    assert [signals for _, _, signals, _, _ in runs] == [MAX_SIGNALS_PER_RUN, 1], runs
    assert all(refused == signals for _, _, signals, refused, _ in runs), runs  # ...or by the run
    assert all(failures == [] for *_, failures in runs), runs  # no deadlock, no retry
    assert all(events < WARN_EVENTS and size < WARN_BYTES for events, size, *_ in runs), runs


async def test_a_decision_in_the_instant_the_run_carries_over_is_judged(
    client: Client, task_queue: str, db_path: Path
) -> None:
    """A run continued-as-new takes its carried state and roster snapshot before its first
    workflow task (``@workflow.init``), so a decision that reaches it there is judged like
    any other, not refused as "it has not started yet". Held in that instant (no worker runs
    its roster-reading activity): a forged decision is refused, alice's is accepted; then
    the run goes on and the refund is paid once."""
    async with worker(client, task_queue, db_path, max_cached_workflows=0):
        run = await park(client, task_queue)
    forged = decision(client, run.handle.id, run.pending, key=forged_key("alice"))
    await flood(run.handle, forged, CARRY_AFTER_SIGNALS)  # the run will carry over
    async with Worker(client, task_queue=task_queue, workflows=[RefundAgent],
                      max_cached_workflows=0,
                      plugins=[TowerPlugin(own_activities=False, tools=False)]):
        latest = await carried_over(client, run.handle)
        async with asyncio.timeout(60):  # its first task ran: it waits to read its roster
            while not any(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                          for e in (await latest.fetch_history()).events):
                await asyncio.sleep(0.2)
        assert "invalid signature" in await refused_update(latest, forged)
        ok = decision(client, run.handle.id, run.pending)
        accepted = await latest.start_update("decide", ok, result_type=dict,
                                             wait_for_stage=WorkflowUpdateStage.ACCEPTED)
    assert refunds(db_path) == []
    async with worker(client, task_queue, db_path):
        out = await accepted.result()
        state = await latest.result()
        assert task_failures(await latest.fetch_history()) == []
    assert out["result"] == "approved" and state["status"] == "DONE"
    assert refunds(db_path) == [("INV-2004", 120000)]


async def flood(handle: Any, payload: dict[str, Any], count: int) -> int:
    """Signal ``count`` times, 500 at a time: how many the server refused for the run's cap
    (any other error fails the test)."""
    over_cap = 0
    for start in range(0, count, 500):
        sent = await asyncio.gather(*(handle.signal("decision", payload)
                                      for _ in range(min(500, count - start))),
                                    return_exceptions=True)
        for error in filter(None, sent):
            if not (isinstance(error, RPCError) and error.status == RPCStatusCode.INVALID_ARGUMENT
                    and OVER_CAP in error.message):
                raise error
            over_cap += 1
    return over_cap


async def carried_over(client: Client, first: Any) -> Any:
    """The chain's current run, once the first has continued-as-new."""
    latest = client.get_workflow_handle(first.id)
    async with asyncio.timeout(120):
        while (await latest.describe()).run_id == first.result_run_id:
            await asyncio.sleep(0.2)
    return latest


async def chain(client: Client, first: Any, forged: dict[str, Any]) -> list[Any]:
    """(events, bytes, signals, refused, worker task failures) for each run of the chain."""
    runs, run_id = [], first.result_run_id
    while run_id:
        handle = client.get_workflow_handle(first.id, run_id=run_id)
        history = await handle.fetch_history()
        signals = sum(1 for e in history.events
                      if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
        audit = await handle.query("approvals", result_type=dict)
        size = (await handle.describe()).raw_description.workflow_execution_info
        runs.append((size.history_length, size.history_size_bytes, signals,
                     audit["refused_total"], task_failures(history)))
        # The audit trail shows the newest refusals, the token named by its size.
        assert len(audit["refused"]) == min(signals, 100)
        assert all(r["decision_id"] == f"token ({len(forged['token'])} chars)"
                   for r in audit["refused"])
        last = history.events[-1].workflow_execution_continued_as_new_event_attributes
        run_id = last.new_execution_run_id or None
    return runs
