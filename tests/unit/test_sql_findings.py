"""Tower's SQL check (tower/activities/sql.py): a real parser names what each statement
does; comments and string literals hide nothing; what it cannot read is a finding."""

from __future__ import annotations

import pytest

from tower.activities.sql import actions, findings


def test_a_statement_after_forty_comment_lines_is_its_own_finding() -> None:
    tail = "".join(f"-- note {i}\n" for i in range(40)) + "DROP TABLE customers;"
    assert findings(["DROP TABLE legacy_notes;", tail]) == [
        "DROP TABLE legacy_notes", "DROP TABLE customers"]


@pytest.mark.parametrize("statement", [
    "INSERT INTO notes (body) VALUES ('x''); DROP TABLE customers; --')",
    "/* DROP TABLE customers; */ CREATE TABLE audit (id INTEGER PRIMARY KEY)",
    "-- DELETE FROM customers\nALTER TABLE customers ADD COLUMN phone TEXT",
    "CREATE INDEX ix_name ON customers (name) -- TRUNCATE TABLE customers",
])
def test_a_statement_in_a_string_or_comment_is_not_a_finding(statement: str) -> None:
    assert findings([statement]) == []


@pytest.mark.parametrize("statement", [
    "garbage here", "DROP TABLE", "select 1 from", "))((", "REPLACE INTO t VALUES (1)",
    "PRAGMA writable_schema = 1", "ATTACH DATABASE 'x.db' AS x",
])
def test_sql_it_cannot_read_is_flagged_as_unknown_never_harmless(statement: str) -> None:
    [action] = actions([statement])
    assert action.destructive and action.what.startswith("UNKNOWN statement 1: ")


def test_each_statement_is_named_by_kind_and_object() -> None:
    named = {a.what: a.destructive for a in actions([
        "DROP TABLE IF EXISTS main.customers", "DROP VIEW v", "ALTER TABLE t DROP COLUMN fax",
        "ALTER TABLE t ADD COLUMN phone TEXT", "ALTER TABLE t RENAME TO u", "DELETE FROM t",
        "UPDATE t SET a = 1", "INSERT OR REPLACE INTO t VALUES (1)", "INSERT INTO t VALUES (1)",
        "INSERT OR IGNORE INTO u VALUES (1)",
        "INSERT INTO v VALUES (1) ON CONFLICT DO UPDATE SET a = 2",
        "CREATE TABLE \"odd; name\" (a)", "SELECT 1"])}
    assert named == {
        "DROP TABLE main.customers": True, "DROP VIEW v": True,
        "ALTER TABLE t DROP COLUMN fax": True, "ALTER TABLE t": False, "DELETE FROM t": True,
        "UPDATE t (every row: no WHERE)": True, "INSERT INTO t, overwriting rows": True,
        "INSERT INTO t": False, "INSERT INTO u": False, "INSERT INTO v, overwriting rows": True,
        'CREATE TABLE "odd; name"': False, "SELECT": False}
