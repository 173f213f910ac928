"""tower.effects on the user's own database — SQLite and a real PostgreSQL: a user's tool
(tests/effects_kit.py) under races, retries, zombie attempts and reconciliation keeps its
invariant (0 overdraws) and acts at most once per action (0 doubles)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from effects_kit import SCHEMA, withdraw
from temporalio.exceptions import ApplicationError

from tower import tool
from tower.contract.wire import ToolCall
from tower.effects import Postgres, SQLite, reconcile, run_tool
from tower.effects._db import qmark_to_format
from tower.effects._tool import Database

START = 10_000


@pytest.fixture(scope="module")
def pg() -> Iterator[Any]:
    from pgserver import Postgres as Server

    server = Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        store: Database = SQLite(tmp_path / "bank.sqlite", schema=SCHEMA)
    else:
        server = request.getfixturevalue("pg")
        store = Postgres(server.database("t"), schema=SCHEMA)
    store.run(lambda tx: tx.execute("INSERT INTO accounts VALUES ('acc', ?)", (START,)))
    return store


def call(key: str, amount: int) -> ToolCall:
    return ToolCall(tool="withdraw", idempotency_key=key,
                    arguments={"account": "acc", "amount": amount})


def ledger(db: Database) -> tuple[int, list[tuple[str, int]]]:
    def read(tx: Any) -> tuple[int, list[tuple[str, int]]]:
        balance = tx.execute("SELECT balance FROM accounts WHERE id='acc'").fetchone()[0]
        rows = tx.execute("SELECT id, amount FROM transfers").fetchall()
        return int(balance), [(str(r[0]), int(r[1])) for r in rows]
    result: tuple[int, list[tuple[str, int]]] = db.run(read)
    return result


def test_racing_attempts_of_one_action_pay_once(db: Database) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: run_tool(withdraw, db, call("run/a", 700)), range(16)))
    assert all(r == results[0] for r in results)
    assert ledger(db) == (START - 700, [(results[0]["transfer"], 700)])


def test_a_refusal_is_typed_and_changes_nothing(db: Database) -> None:
    with pytest.raises(ApplicationError) as refused:
        run_tool(withdraw, db, call("run/big", START + 1))
    assert (refused.value.type, refused.value.non_retryable) == ("EffectRefused", True)
    assert refused.value.details[0] == {"code": "insufficient", "tool": "withdraw"}
    assert ledger(db) == (START, [])
    assert reconcile(db, "run/big") is None  # no claim was left behind either


def test_the_same_key_for_other_arguments_returns_the_first_effect(db: Database) -> None:
    # An approved request's key does not name the arguments (tower/core/keys.py): its
    # re-approval with an edit asks under the same key for another amount, and gets the
    # first transfer back, acting on nothing.
    first = run_tool(withdraw, db, call("run/k", 100))
    assert run_tool(withdraw, db, call("run/k", 60)) == first
    assert ledger(db) == (START - 100, [(first["transfer"], 100)])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_races_retries_zombies_and_reconciliation(db: Database, seed: int) -> None:
    """Actions racing on one balance; each attempted several times (retries, a fork's
    re-run), some attempts given up on (an old epoch) after the run reconciled: never an
    overdraw, never two transfers for one action, and reconcile never lies."""
    rng = random.Random(seed)
    actions = [(f"run-{i}/pay", rng.randint(500, 3_000)) for i in range(12)]
    plan = [(key, amount, rng.randint(1, 10**6)) for key, amount in actions
            for _ in range(rng.randint(1, 3))]
    rng.shuffle(plan)
    said_none: dict[str, int] = {}  # key -> the latest epoch whose reconcile found nothing

    def attempt(step: tuple[str, int, int]) -> None:
        key, amount, epoch = step
        try:
            if epoch % 5 == 0:
                if reconcile(db, key, epoch=epoch) is None:
                    # The run gave up at this epoch: only a later attempt (a fork's re-run)
                    # may make the action now, never one given up on.
                    said_none[key] = max(epoch, said_none.get(key, 0))
                return
            run_tool(withdraw, db, call(key, amount), epoch=epoch)
        except ApplicationError as exc:
            assert exc.type in ("EffectRefused", "FencedOff"), exc

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(attempt, plan))
    balance, transfers = ledger(db)
    assert balance >= 0 and balance + sum(a for _, a in transfers) == START  # 0 overdraws
    made = {key: r for key, _ in actions if (r := reconcile(db, key, epoch=10**7)) is not None}
    assert len(transfers) == len({t for t, _ in transfers}) == len(made)  # 0 doubles
    assert sorted(t for t, _ in transfers) == sorted(r["transfer"] for r in made.values())
    made_at = dict(db.run(lambda tx: tx.execute(
        "SELECT idempotency_key, epoch FROM tower_effects WHERE result IS NOT NULL").fetchall()))
    lied = {k for k, e in said_none.items() if k in made and made_at[k] <= e}
    assert not lied, "reconcile said nothing, then an attempt it had given up on made it"


def test_rows_read_by_index_by_name_and_as_a_dict_on_both(db: Database) -> None:
    """One tool's code on both databases: what it does with a sqlite3.Row works on
    PostgreSQL's rows too, and executemany takes ``?`` placeholders on both."""
    db.run(lambda tx: tx.executemany("INSERT INTO transfers VALUES (?, ?, ?)",
                                     [("t1", "acc", 5), ("t2", "acc", 7)]))
    rows = db.run(lambda tx: tx.execute(
        "SELECT id, amount FROM transfers ORDER BY id").fetchall())
    assert [(r[0], r["amount"], dict(r)) for r in rows] == [
        ("t1", 5, {"id": "t1", "amount": 5}), ("t2", 7, {"id": "t2", "amount": 7})]
    first, amount = rows[0]
    assert (first, amount, list(rows[1].keys())) == ("t1", 5, ["id", "amount"])
    with pytest.raises(IndexError):
        rows[0]["balance"]
    if isinstance(db, Postgres):  # and still a tuple, for the callers that take one
        assert rows[0] == ("t1", 5) and rows[0][1:] == (5,)
        # Where it is, for a start-up line: never the password.
        assert db.describe().startswith("PostgreSQL postgresql://temporal:***@127.0.0.1:")


def test_qmark_placeholders_become_psycopgs() -> None:
    assert qmark_to_format("SELECT '?', \"a?\" FROM t WHERE x = ? AND y LIKE '5%'") == (
        "SELECT '?', \"a?\" FROM t WHERE x = %s AND y LIKE '5%%'")


def test_a_tool_needs_its_arguments_model() -> None:
    with pytest.raises(TypeError, match="annotated with a pydantic model"):
        tool(side_effect=True)(lambda db, args, call: {})
    assert sqlite3  # the stdlib driver: SQLite needs nothing installed
