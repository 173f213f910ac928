"""The migration agent on the real dev server, against a real SQLite database."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from gatekit import decide, make_shop, new_id, schema, wait_pending
from inboxkit import inbox, park_migration, signed_in
from markupsafe import escape
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from test_cli_approvals import tower

from activities.tools.migrations import destructive_findings, split_statements
from tower.activities.model import ModelSettings
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from worker import build_worker
from workflows.migration import MigrationAgent, MigrationRequest

DROP = "ALTER TABLE customers DROP COLUMN fax;\nDROP TABLE legacy_notes;"
ADD = "ALTER TABLE customers ADD COLUMN phone TEXT;\nCREATE INDEX ix_name ON customers(name);"


async def start(client: Client, task_queue: str, script: str, **kw: Any) -> Any:
    run = new_id("migration")
    request = MigrationRequest(database="shop", script=script, **kw)
    return await client.start_workflow(MigrationAgent.run, request, id=run,
                                       task_queue=task_queue)


def worker(client: Client, task_queue: str, db_path: Path) -> Any:
    return build_worker(client, task_queue=task_queue, db_path=db_path, models=ModelSettings())


# The attack of issue 30: a second DROP after forty comment lines.
HIDDEN_TAIL = ("DROP TABLE legacy_notes;\n" + "".join(f"-- note {i}: nothing to see\n"
                                                      for i in range(40))
               + "DROP TABLE customers;")


def test_sql_check_is_deterministic_and_ignores_strings_and_comments() -> None:
    script = "-- DROP TABLE x\nINSERT INTO t VALUES ('DROP TABLE y; DELETE FROM z');\n" + ADD
    assert destructive_findings(script) == []
    assert len(split_statements(script)) == 3
    found = destructive_findings(DROP + "\nDELETE FROM t WHERE a=1;\nUPDATE t SET a = 1;")
    assert found == ["ALTER TABLE customers DROP COLUMN fax", "DROP TABLE legacy_notes",
                     "DELETE FROM t", "UPDATE t SET a (every row: no WHERE)"]
    assert destructive_findings(HIDDEN_TAIL) == ["DROP TABLE legacy_notes",
                                                 "DROP TABLE customers"]


async def test_safe_migration_applies_without_a_gate(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    async with worker(client, task_queue, db_path):
        state = await (await start(client, task_queue, ADD)).result()
    assert state.applied and not state.destructive and state.approvals == []
    assert any(name == "ix_name" for _, name, _ in schema(shop))


async def test_destructive_migration_waits_then_applies_on_approval(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, DROP)
        p = (await wait_pending(handle))["pending"]
        assert p["role"] == "dba"
        assert p["proposal"]["findings"] == ["ALTER TABLE customers DROP COLUMN fax",
                                             "DROP TABLE legacy_notes"]
        assert "legacy_notes" in str(schema(shop))  # nothing applied while waiting
        out = await decide(client, handle, p, approver="dana", role="dba")
        state = await handle.result()
    assert out["result"] == "approved" and state.applied
    assert "legacy_notes" not in str(schema(shop)) and "fax" not in str(schema(shop))
    with sqlite3.connect(shop) as db:  # the data that was not dropped is all still there
        assert db.execute("SELECT name FROM customers ORDER BY id").fetchall() == [
            ("Ada",), ("Grace",)]


async def test_rejected_migration_changes_nothing(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, DROP)
        p = (await wait_pending(handle))["pending"]
        await decide(client, handle, p, approver="dana", role="dba", verdict=Verdict.REJECT,
                     note="keep the notes")
        state = await handle.result()
    assert not state.applied and schema(shop) == before
    assert state.report == "Not applied: rejected by dana: keep the notes. Nothing changed."


async def test_schema_changed_while_waiting_goes_back_to_analysis(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, DROP)
        p = (await wait_pending(handle))["pending"]
        with sqlite3.connect(shop) as db:  # someone else migrates meanwhile
            db.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY)")
        out = await decide(client, handle, p, approver="dana", role="dba")
        assert out["result"] == "stale" and "changed since analysis" in out["reason"]
        assert "legacy_notes" in str(schema(shop))  # the stale approval applied nothing
        again = (await wait_pending(handle))["pending"]
        assert again["visit"] == 2
        await decide(client, handle, again, approver="dana", role="dba")
        state = await handle.result()
    assert [r.status for r in state.approvals] == ["stale", "approved"]
    assert state.applied and "legacy_notes" not in str(schema(shop))
    assert state.visits["analyze"] == 2


async def test_invalid_migration_is_reported_not_applied(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path):
        state = await (await start(client, task_queue, "DROP TABLE nope;")).result()
    assert not state.valid and "no such table" in state.report and schema(shop) == before


async def test_a_drop_hidden_after_comment_lines_is_its_own_finding_in_the_signed_proposal(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, HIDDEN_TAIL)
        p = (await wait_pending(handle))["pending"]  # the gate applies
        assert p["proposal"]["findings"] == ["DROP TABLE legacy_notes", "DROP TABLE customers"]
        # What the DBA signs is the digest of this proposal, findings included.
        record = GateRecord.model_validate(p)
        other = record.model_copy(update={"proposal": {**record.proposal, "findings": [
            "DROP TABLE legacy_notes"]}})
        assert proposal_digest(other) != proposal_digest(record)
        out = await decide(client, handle, p, approver="dana", role="dba",
                           verdict=Verdict.REJECT, note="not customers")
        state = await handle.result()
    assert out["result"] == "rejected" and state.approvals[-1].decision is not None
    assert state.approvals[-1].decision.proposal == proposal_digest(record)
    assert schema(shop) == before and not state.applied


async def test_sql_the_parser_cannot_read_is_gated_as_unknown(
    client: Client, task_queue: str, db_path: Path
) -> None:
    # SQLite runs it (a trigger); the check has no rule for it: never shown as harmless.
    script = ("CREATE TRIGGER wipe AFTER INSERT ON legacy_notes BEGIN DELETE FROM customers; "
              "END;")
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, script)
        p = (await wait_pending(handle))["pending"]
        assert p["proposal"]["findings"] == [
            "statement 1 not understood: no rule for CREATE TRIGGER; treated as destructive"]
        await decide(client, handle, p, approver="dana", role="dba", verdict=Verdict.REJECT)
        state = await handle.result()
    assert state.destructive and not state.applied and schema(shop) == before


# The attacks of issue 37: customers dropped under another table's name, and customers'
# names dropped under the fax column's name.
LAUNDERED = ("DROP TABLE legacy_notes;\nALTER TABLE customers RENAME TO legacy_notes;\n"
             "DROP TABLE legacy_notes;")
SWAPPED = ("ALTER TABLE customers RENAME COLUMN fax TO fax_old;\n"
           "ALTER TABLE customers RENAME COLUMN name TO fax;\n"
           "ALTER TABLE customers DROP COLUMN fax;")
NAMED = {LAUNDERED: ["DROP TABLE legacy_notes", "ALTER TABLE customers RENAME TO legacy_notes",
                     "DROP TABLE customers (renamed to legacy_notes at statement 2)"],
         SWAPPED: ["ALTER TABLE customers RENAME COLUMN fax TO fax_old",
                   "ALTER TABLE customers RENAME COLUMN name TO fax",
                   "ALTER TABLE customers DROP COLUMN name (renamed to fax at statement 2)"]}


def value_shown(entry: list[str], name: str) -> str:
    """A field's value as `tower pending` shows it: on its line, or as rows in its gutter
    (``│`` starts a line of the value, ``┆`` goes on with one the renderer wrapped)."""
    at = next(n for n, line in enumerate(entry) if line.startswith(f"    {name}:"))
    head = entry[at].split(":", 1)[1].strip()
    if head != "|":
        return head
    text = ""
    for line in entry[at + 1:]:
        row = line.lstrip(" ")
        if row.startswith("│ "):
            text += ("\n" if text else "") + row[2:]
        elif row.startswith("┆ "):
            text += row[2:]
        else:
            break
    return text


async def test_a_loss_under_a_new_name_is_named_by_the_old_one_wherever_the_dba_looks(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path), inbox(client) as url:
        handles = {script: await park_migration(client, task_queue, script)
                   for script in NAMED}
        code, listed, err = await tower(env, tmp_path, "pending")
        dave = await signed_in(url, "dave")
        try:
            pages = {s: (await dave.get(f"/runs/{h.id}")).text for s, h in handles.items()}
        finally:
            await dave.aclose()
        for script, handle in handles.items():
            p = (await wait_pending(handle))["pending"]
            assert p["proposal"]["findings"] == NAMED[script]  # what the DBA signs
            # Whole in `tower pending`'s entry (its rows in the field's gutter) and on the
            # inbox page.
            shown = json.dumps(NAMED[script])
            entry = listed[listed.index(handle.id):].split("\n\n")[0].splitlines()
            assert value_shown(entry, "findings") == shown, entry
            assert f">{escape(shown)}</pre>" in pages[script]
            await handle.terminate("test over")
    assert code == 0, err
    assert schema(shop) == before


async def test_a_statement_the_check_cannot_follow_is_gated_and_named(
    client: Client, task_queue: str, db_path: Path
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    async with worker(client, task_queue, db_path):
        handle = await start(client, task_queue, "PRAGMA user_version = 7;")
        p = (await wait_pending(handle))["pending"]
        assert p["proposal"]["findings"] == [
            "statement 1 not understood: no rule for PRAGMA; treated as destructive"]
        await decide(client, handle, p, approver="dana", role="dba", verdict=Verdict.REJECT)
        state = await handle.result()
    assert state.destructive and not state.applied and schema(shop) == before
