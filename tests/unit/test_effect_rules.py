"""The exactly-once and invariant rules, without a server: the key rule case by case (and
read from the refund agent's real states), the refund's invariants in its transaction (also
under a race), and the fence that keeps an attempt given up on from committing after the
run reconciled."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from gatekit import in_process_tools
from temporalio.exceptions import ApplicationError

from activities.tools import TOOLS, ToolsDb
from tower import Message
from tower.contract.failures import Code
from tower.contract.wire import Authority, ToolCall
from tower.core.keys import Action, action_of, effect_key
from tower.effects import reconcile
from tower.testing import approve, reject, run_agent
from workflows.refund import RefundAgent, RefundState

PROPOSAL = "sha256:" + "ab" * 32
REQUEST = Action("issue_refund", 1, "refund_review", PROPOSAL)  # an approved request
UNGATED = Action("issue_refund", 1)  # a visit no gate approved
ARGS = {"invoice_id": "INV-2004", "amount_cents": 120000}
BASE: dict[str, Any] = dict(workflow_id="refund-1", chain="run-a", action=REQUEST,
                            tool="issue_refund", nth=0, arguments=ARGS)


def key(**change: Any) -> str:
    return effect_key(**{**BASE, **change})


def test_every_approval_of_one_request_has_one_key() -> None:
    # The approved request (chain, gate, visit, proposal digest) is the action: a fork's,
    # a retry's or a replayed token's re-approval of it, with or without edits, is the same
    # action, so the arguments its edits make are not in the key (nor is the decision).
    lower = {**ARGS, "amount_cents": 70000}
    assert key(arguments=lower) == key() == key(arguments={})
    assert key() == "refund-1/run-a/refund_review@1/abababababababab/issue_refund#0"


@pytest.mark.parametrize("change", [
    {"action": Action("issue_refund", 1, "refund_review", "sha256:" + "cd" * 32)},  # re-planned
    {"action": Action("issue_refund", 2, "refund_review", PROPOSAL)},  # a loop's next request
    {"action": Action("pay", 1, "pay_review", PROPOSAL)},  # another gate
    {"action": UNGATED},  # the same call without an approval
    {"nth": 1},  # the node's second call of the tool for the request
    {"chain": "run-b"},  # a new run reusing the workflow id
    {"workflow_id": "refund-2"},
])
def test_another_request_or_call_has_another_key(change: dict[str, Any]) -> None:
    assert key(**change) != key()


def test_a_call_no_gate_approved_keeps_todays_key_arguments_included() -> None:
    plain = key(action=UNGATED)
    assert plain == key(action=UNGATED, arguments=dict(reversed(list(ARGS.items()))))
    assert plain != key(action=UNGATED, arguments={**ARGS, "amount_cents": 100000})
    digest = hashlib.sha256(json.dumps(ARGS, sort_keys=True).encode()).hexdigest()[:16]
    assert plain == f"refund-1/run-a/issue_refund@1/-/issue_refund#0/{digest}"


async def test_the_action_is_read_from_the_approved_request_in_the_runs_state(
        tmp_path: Path) -> None:
    """On the refund agent's real states (in process): an approval with or without an edit
    carries out the same request; a rejected or expired one carries out none."""
    def asked() -> RefundState:
        return RefundState(messages=[Message(role="user", content="Please refund $1,200 on "
                                             "invoice INV-2004")],
                           limit_cents=50_000, review_timeout_seconds=3600)

    async def action(*said: Any) -> Action:  # each run on its own fresh tools' database
        tools = in_process_tools(tmp_path / f"tools-{len(list(tmp_path.iterdir()))}.sqlite")
        run = await run_agent(RefundAgent, asked(), decisions=said, tools=tools)
        return action_of(run.state, "issue_refund")

    plain = await action(approve("ann"))
    edited = await action(approve("bob", edits={"amount_cents": 100_000}))
    assert plain == edited and plain.gate == "refund_review" and plain.visit == 1
    assert plain.proposal.startswith("sha256:")
    assert await action(reject("ann", "no")) == Action("issue_refund", 1)
    assert await action() == Action("issue_refund", 1)  # expired


def refund(box: ToolsDb, k: str, cents: int, *, authority: Authority | None = None,
           invoice: str = "INV-9000", epoch: int | None = None) -> dict[str, Any]:
    call = ToolCall(tool="issue_refund", idempotency_key=k, authority=authority or Authority(),
                    arguments={"invoice_id": invoice, "amount_cents": cents, "reason": "r"})
    return box.call(TOOLS["issue_refund"], call, epoch=epoch)


def paid(box: ToolsDb) -> int:
    with sqlite3.connect(box.db_path) as db:
        return int(db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM refunds").fetchone()[0])


@pytest.fixture
def box(tmp_path: Path) -> ToolsDb:
    tools = ToolsDb(tmp_path / "t.sqlite")
    with sqlite3.connect(tools.db_path) as db:
        db.execute("INSERT INTO invoices VALUES ('INV-9000', 'ACC-1001', 1000000, 'paid', "
                   "'2026-11-20')")
    return tools


def refused(fn: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(ApplicationError) as info:
        fn(*args, **kw)
    assert info.value.type == Code.EFFECT_REFUSED and info.value.non_retryable
    return str(info.value.details[0]["code"])


def test_racing_refunds_never_overdraw(box: ToolsDb) -> None:
    approved = Authority(limits={"limit_cents": 50_000}, decision_id="d",
                         proposal={"amount_cents": 400_000})
    outcomes: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            refund(box, f"k{i}", 400_000, authority=approved)
            result = "paid"
        except ApplicationError as exc:
            result = str(exc.details[0]["code"])
        with lock:
            outcomes.append(result)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(8)))
    assert sorted(outcomes) == ["over_refundable"] * 6 + ["paid"] * 2
    assert paid(box) == 800_000


def test_over_the_limit_needs_an_approval_for_that_amount(box: ToolsDb) -> None:
    limit = Authority(limits={"limit_cents": 50_000})
    assert refused(refund, box, "a", 60_000, authority=limit) == "over_limit"
    low = Authority(limits={"limit_cents": 50_000}, decision_id="d",
                    proposal={"amount_cents": 55_000})
    assert refused(refund, box, "b", 60_000, authority=low) == "over_limit"
    # An approval with no decision behind it is no approval.
    forged = Authority(limits={"limit_cents": 50_000}, proposal={"amount_cents": 60_000})
    assert refused(refund, box, "c", 60_000, authority=forged) == "over_limit"
    assert paid(box) == 0
    ok = Authority(limits={"limit_cents": 50_000}, decision_id="d",
                   proposal={"amount_cents": 60_000})
    assert refund(box, "d", 60_000, authority=ok)["amount_cents"] == 60_000
    assert refund(box, "e", 50_000, authority=limit)["amount_cents"] == 50_000  # at the limit
    # No limit passed (a desk without a gate): the tool's default holds.
    assert refused(refund, box, "f", 50_001) == "over_limit"
    assert paid(box) == 110_000


def test_more_than_refundable_is_refused_and_a_refusal_leaves_no_key(box: ToolsDb) -> None:
    assert refused(refund, box, "k", 4_901, invoice="INV-2001") == "over_refundable"
    assert refused(refund, box, "x", 100, invoice="INV-0000") == "no_invoice"
    with sqlite3.connect(box.db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM tower_effects").fetchone()[0] == 0
    assert refund(box, "k2", 4_900, invoice="INV-2001")["amount_cents"] == 4_900
    assert refused(refund, box, "k3", 1, invoice="INV-2001") == "over_refundable"


def test_an_attempt_given_up_on_cannot_commit_after_reconciliation(box: ToolsDb) -> None:
    # Attempt 1 (epoch 10) stalls; the run reconciles (epoch 20): nothing made, and now
    # attempt 1 wakes up and tries to pay: it is fenced off and changes nothing.
    assert reconcile(box.db, "k", 20) is None
    with pytest.raises(ApplicationError) as info:
        refund(box, "k", 1000, epoch=10)
    assert info.value.type == "FencedOff" and info.value.non_retryable
    assert paid(box) == 0
    # A later attempt (the operator's retry) owns the key again and pays, once.
    first = refund(box, "k", 1000, epoch=30)
    assert refund(box, "k", 1000, epoch=10) == first  # made: the same result, whoever asks
    assert reconcile(box.db, "k", 40) == first
    assert paid(box) == 1000


def test_an_attempt_waits_for_the_lock_and_then_acts_once(box: ToolsDb) -> None:
    holder = sqlite3.connect(box.db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with ThreadPoolExecutor(2) as pool:
        later = [pool.submit(refund, box, "k", 500, epoch=e) for e in (1, 2)]
        threading.Event().wait(0.5)
        assert not any(f.done() for f in later)  # both wait for the other writer
        holder.execute("ROLLBACK")
        results = []
        for f in later:
            try:
                results.append(f.result(timeout=10))
            except ApplicationError as exc:  # epoch 1 may find epoch 2 owns the key
                assert exc.type == "FencedOff"
    holder.close()
    assert results and all(r == results[0] for r in results)
    assert paid(box) == 500


def test_racing_sign_ups_with_one_address_register_once(box: ToolsDb) -> None:
    def sign_up(i: int) -> str:
        call = ToolCall(tool="create_account", idempotency_key=f"signup-{i}", arguments={
            "name": f"Kim {i}", "email": "Kim@Example.com", "company": "Acme"})
        try:
            return str(box.call(TOOLS["create_account"], call)["account_id"])
        except ApplicationError as exc:
            return str(exc.details[0]["code"])

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(sign_up, range(6)))
    assert outcomes.count("already_registered") == 5
    with sqlite3.connect(box.db_path) as db:
        assert db.execute("SELECT COUNT(*) FROM accounts WHERE lower(email)='kim@example.com'"
                          ).fetchone()[0] == 1


def test_a_migration_applies_only_the_approved_script(box: ToolsDb) -> None:
    shop = box.db_path.parent / "databases" / "ledger.sqlite"
    shop.parent.mkdir(exist_ok=True)
    with sqlite3.connect(shop) as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    with sqlite3.connect(shop) as db:
        from activities.tools.migrations import fingerprint
        before = fingerprint(db)
    drop = "DROP TABLE notes;"

    def apply(script: str, authority: Authority, k: str) -> dict[str, Any]:
        call = ToolCall(tool="apply_migration", idempotency_key=k, authority=authority,
                        arguments={"database": "ledger", "script": script,
                                   "expected_fingerprint": before})
        return box.call(TOOLS["apply_migration"], call)

    assert refused(apply, drop, Authority(), "a") == "unapproved_destructive"
    other = Authority(decision_id="d", proposal={"script": "SELECT 1;"})
    assert refused(apply, drop, other, "b") == "not_the_approved_script"
    with sqlite3.connect(shop) as db:  # nothing changed
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("notes",)]
    approved = Authority(decision_id="d", proposal={"script": drop})
    assert apply(drop, approved, "c")["applied"] is True
