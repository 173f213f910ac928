"""The checker can fail: on a real tools' database it flags an overdraw, a double payment and
every way a run's state or history can disagree with the database; and its harness cannot
hang on a step that swallows cancellation (as temporalio's update calls do)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from jepsen.bounds import HarnessStuck, bounded, persist, stop_all
from jepsen.check import RunView, check
from temporalio.service import RPCError, RPCStatusCode

from activities.tools.db import connect

INVOICE, TOTAL = "INV-9001", 10_000


@pytest.fixture
def tools_db(tmp_path: Path) -> Path:
    path = tmp_path / "tools.sqlite"
    with connect(path) as db:
        db.execute("INSERT INTO invoices VALUES (?, 'ACC-1001', ?, 'paid', '2026-11-20')",
                   (INVOICE, TOTAL))
    return path


def pay(db_path: Path, refund: str, cents: int, run: str, key: str = "issue_refund#0") -> None:
    db = sqlite3.connect(db_path)
    with db:
        db.execute("INSERT INTO refunds VALUES (?, ?, ?, 'test', ?)",
                   (refund, INVOICE, cents, f"{run}/chain/{key}"))
    db.close()


def done(run: str, refund: str = "", cents: int = 0, **more: Any) -> RunView:
    state = {"status": "DONE", "node": "DONE", "refund_id": refund, "amount_cents": cents}
    return RunView(run, {**state, **more}, [refund] if refund else [])


def test_a_trial_that_kept_every_rule_has_no_violation(tools_db: Path) -> None:
    pay(tools_db, "rf_1", 6_000, "run-a")
    pay(tools_db, "rf_2", 4_000, "run-b")
    runs = [done("run-a", "rf_1", 6_000), done("run-b", "rf_2", 4_000),
            RunView("run-c", {"status": "FAILED", "node": "FAILED", "refund_id": ""})]
    assert check(tools_db, INVOICE, TOTAL, runs) == []


def test_an_overdraw_is_a_violation(tools_db: Path) -> None:
    pay(tools_db, "rf_1", 6_000, "run-a")
    pay(tools_db, "rf_2", 6_000, "run-b")
    problems = check(tools_db, INVOICE, TOTAL, [done("run-a", "rf_1", 6_000),
                                                done("run-b", "rf_2", 6_000)])
    assert problems == [f"{INVOICE}: refunded 12000 cents of {TOTAL}"]


def test_a_request_paid_twice_is_a_violation_even_when_its_state_is_unknown(
        tools_db: Path) -> None:
    pay(tools_db, "rf_1", 1_000, "run-a")
    pay(tools_db, "rf_2", 1_000, "run-a", key="issue_refund#0/fork")
    for run in (done("run-a", "rf_1", 1_000), RunView("run-a", None)):
        assert check(tools_db, INVOICE, TOTAL, [run]) == [
            "run-a: paid 2 times: ['rf_1', 'rf_2']"]


def test_a_state_that_disagrees_with_the_database_is_a_violation(tools_db: Path) -> None:
    pay(tools_db, "rf_1", 1_000, "run-a")
    pay(tools_db, "rf_2", 2_000, "run-b")
    pay(tools_db, "rf_3", 3_000, "run-c")
    runs = [done("run-a", "rf_404", 1_000),  # a refund the database does not have
            done("run-b", "rf_2", 2_500),  # another amount than was paid
            RunView("run-c", {"status": "FAILED", "node": "FAILED", "refund_id": ""}),
            RunView("run-d", {"status": "DONE", "node": "DONE", "refund_id": ""},
                    ["rf_5"])]  # its history reports a refund its state does not name
    assert check(tools_db, INVOICE, TOTAL, runs) == [
        "run-a: state says rf_404 but the database has no such refund",
        "run-a: history reports rf_404, the database has none",
        "run-b: state says 2500 cents, database 2000",
        "run-c: FAILED with no refund_id while rf_3 exists",
        "run-d: history reports rf_5, the database has none"]


def test_a_run_not_settled_is_stuck(tools_db: Path) -> None:
    run = RunView("run-a", {"status": "AWAITING_APPROVAL", "node": "issue_refund"})
    assert check(tools_db, INVOICE, TOTAL, [run]) == [
        "run-a: stuck at issue_refund (AWAITING_APPROVAL)"]


async def deaf(until: asyncio.Event) -> None:
    """Swallows cancellation (until released), as a loop around temporalio's update call
    did: the SDK turns CancelledError into WorkflowUpdateRPCTimeoutOrCancelledError."""
    while not until.is_set():
        try:
            await until.wait()
        except asyncio.CancelledError:
            continue


async def test_a_step_that_ignores_cancellation_is_a_harness_error_not_a_hang() -> None:
    release = asyncio.Event()
    try:
        with pytest.raises(HarnessStuck, match="approving run-a: no answer in 0 s"):
            await bounded("approving run-a", 0.1, deaf(release))
        task = asyncio.create_task(deaf(release), name="approver of run-a")
        await asyncio.sleep(0)  # it runs up to its first wait
        assert await stop_all("trial task", [task], seconds=0.1) == [
            "trial task approver of run-a still running 0 s after it was cancelled"]
    finally:
        release.set()  # the deaf steps end here, not with the session's loop


async def test_persist_asks_again_on_server_errors_and_names_the_last_one() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RPCError("context canceled", RPCStatusCode.CANCELLED, b"")
        return "answer"

    assert await persist("querying run-a", 10, flaky) == "answer" and len(calls) == 3

    async def down() -> str:
        raise RPCError("query timed out", RPCStatusCode.DEADLINE_EXCEEDED, b"")

    with pytest.raises(HarnessStuck, match="querying run-a: .*last error: RPCError: query"):
        await persist("querying run-a", 0.2, down)
