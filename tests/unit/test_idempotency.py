"""The tools' store enforces idempotency keys: a retried call (same key) acts once and
returns the first result, even when two attempts race; a new key acts again."""

from __future__ import annotations

import hashlib
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from activities.tools import TOOLS, ToolsDb
from tower.contract.wire import ToolCall

CHARGE = {"card": "tok_visa", "amount": "10.50"}


def charge(box: ToolsDb, key: str) -> dict[str, object]:
    return box.call(TOOLS["charge_payment"], ToolCall(tool="charge_payment", arguments=CHARGE,
                                                      idempotency_key=key))


def rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0])


def test_the_same_key_charges_once_and_returns_the_first_result(tmp_path: Path) -> None:
    box = ToolsDb(tmp_path / "t.sqlite")
    first = charge(box, "wf/run/4/0")
    assert charge(box, "wf/run/4/0") == first and first["status"] == "paid"
    assert rows(box.db_path) == 1
    assert charge(box, "wf/run/4/1") != first  # another call: another charge
    assert rows(box.db_path) == 2


def test_racing_attempts_with_one_key_charge_once(tmp_path: Path) -> None:
    # A timed-out attempt still running while its retry starts on another worker.
    box = ToolsDb(tmp_path / "t.sqlite")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: charge(box, "wf/run/7/0"), range(16)))
    assert rows(box.db_path) == 1
    assert all(r == results[0] for r in results)


def test_a_failed_effect_leaves_no_key_behind(tmp_path: Path) -> None:
    """The effect and its key commit together: an attempt that fails records nothing,
    so the retry really acts."""
    box = ToolsDb(tmp_path / "t.sqlite")
    ship = TOOLS["create_shipment"]
    call = ToolCall(tool=ship.name, idempotency_key="k",
                    arguments={"reservation_id": "rs_000000000000", "address": "1 Main St"})
    taken = "sh_" + hashlib.sha256(b"k").hexdigest()[:12]
    with sqlite3.connect(box.db_path) as conn:  # make the first attempt fail mid-effect
        conn.execute("INSERT INTO shipments VALUES (?, 'x', 'x', 'other')", (taken,))
    with pytest.raises(sqlite3.IntegrityError):
        box.call(ship, call)
    with sqlite3.connect(box.db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM tower_effects").fetchone()[0] == 0
        conn.execute("DELETE FROM shipments")
    assert box.call(ship, call) == {"shipment_id": taken}
    with sqlite3.connect(box.db_path) as conn:
        assert conn.execute("SELECT tool FROM tower_effects").fetchall() == [("create_shipment",)]


def test_the_same_key_with_other_arguments_returns_the_first_result_and_acts_on_nothing(
    tmp_path: Path,
) -> None:
    # An approved request's key does not name the arguments (tower/core/keys.py): a
    # re-approval of it with an edit asks under the same key for another amount and gets
    # the first charge back; nothing more is charged.
    box = ToolsDb(tmp_path / "t.sqlite")
    first = charge(box, "wf/first-run/refund_review@1/abcd/charge_payment#0")
    other = ToolCall(tool="charge_payment", arguments={**CHARGE, "amount": "9.00"},
                     idempotency_key="wf/first-run/refund_review@1/abcd/charge_payment#0")
    assert box.call(TOOLS["charge_payment"], other) == first
    assert rows(box.db_path) == 1
