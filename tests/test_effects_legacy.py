"""An upgrade to tower.effects does not pay twice: effects recorded before it (the example's
and the template's own ``effects`` table, keyed by the decision) are found for the same
action — a run started before the upgrade and retried or forked after it, re-approved or
not, gets the first result; other arguments are another action (tower/effects/_legacy.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from effects_kit import SCHEMA, withdraw

from tower.contract.wire import ToolCall
from tower.core.keys import effect_key, legacy_effect_key
from tower.effects import SQLite, reconcile

ARGS: dict[str, Any] = {"account": "acc", "amount": 700}
# The tables older projects made: the example's (tool, arguments) and the template's (epoch).
EXAMPLE = ("CREATE TABLE effects (idempotency_key TEXT PRIMARY KEY, tool TEXT NOT NULL, "
           "result TEXT NOT NULL, arguments TEXT)")
TEMPLATE = ("CREATE TABLE effects (idempotency_key TEXT PRIMARY KEY, epoch INTEGER NOT NULL, "
            "result TEXT)")


def new_key(arguments: dict[str, Any], visit: int = 1) -> str:
    return effect_key(workflow_id="pay-1", chain="run-a", node="pay", visit=visit,
                      proposal="sha256:" + "ab" * 32, tool="withdraw", nth=0,
                      arguments=arguments)


def old_key(decision: str) -> str:
    return legacy_effect_key(workflow_id="pay-1", chain="run-a", node="pay", decision=decision,
                             tool="withdraw", nth=0, arguments=ARGS)


def upgraded(tmp_path: Path, table: str, rows: list[tuple[str, str | None]]) -> SQLite:
    """A database an older project wrote: its balance already paid 700 under ``rows``."""
    path = tmp_path / "bank.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(SCHEMA + ";" + table)
        db.execute("INSERT INTO accounts VALUES ('acc', 9300)")
        db.execute("INSERT INTO transfers VALUES ('old', 'acc', 700)")
        for key, result in rows:
            if "epoch" in table:
                db.execute("INSERT INTO effects VALUES (?, 1, ?)", (key, result))
            else:
                db.execute("INSERT INTO effects VALUES (?, 'withdraw', ?, NULL)", (key, result))
    return SQLite(path, schema=SCHEMA)


def transfers(store: SQLite) -> list[tuple[str, int]]:
    with sqlite3.connect(store.path) as db:
        return db.execute("SELECT id, amount FROM transfers ORDER BY id").fetchall()


def pay(store: SQLite, key: str, arguments: dict[str, Any] = ARGS) -> dict[str, Any]:
    return withdraw.call(store, ToolCall(tool="withdraw", idempotency_key=key,
                                         arguments=arguments))


PAID = json.dumps({"transfer": "old", "amount": 700})


@pytest.mark.parametrize("table", [EXAMPLE, TEMPLATE], ids=["example", "template"])
def test_a_fork_after_the_upgrade_re_approved_gets_the_first_result(tmp_path: Path,
                                                                   table: str) -> None:
    store = upgraded(tmp_path, table, [(old_key("decision-1"), PAID)])
    # The fork's new approval has another decision id; the action is the same.
    assert pay(store, new_key(ARGS)) == {"transfer": "old", "amount": 700}
    assert reconcile(store, new_key(ARGS)) == {"transfer": "old", "amount": 700}
    # The old run's own path (its replay computes the old key) finds it too.
    assert pay(store, old_key("decision-1")) == {"transfer": "old", "amount": 700}
    assert transfers(store) == [("old", 700)]


def test_other_arguments_after_the_upgrade_are_a_new_action(tmp_path: Path) -> None:
    store = upgraded(tmp_path, EXAMPLE, [(old_key("decision-1"), PAID)])
    made = pay(store, new_key({"account": "acc", "amount": 600}),
               {"account": "acc", "amount": 600})
    assert made["amount"] == 600 and len(transfers(store)) == 2


def test_a_claim_the_old_code_left_without_a_result_is_not_an_effect(tmp_path: Path) -> None:
    store = upgraded(tmp_path, TEMPLATE, [(old_key("decision-1"), None)])
    assert reconcile(store, new_key(ARGS)) is None
    made = pay(store, new_key(ARGS))
    assert made["transfer"] != "old" and len(transfers(store)) == 2
