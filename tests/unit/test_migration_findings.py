"""The migration tool's SQL check (activities/tools/sql_findings.py): every statement that
can lose or move data is a finding naming each table and column by the name it had before
the script ran; comments and string literals hide nothing; what it cannot follow is
flagged, never passed as harmless. And the dry run that goes with it cannot commit."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from activities.tools.migrations import (
    Inspect,
    create_example_shop,
    destructive_findings,
    inspect_migration,
)
from activities.tools.sql_findings import findings

# The attacks of issue 37: a table laundered through a rename, and a column swap.
LAUNDERED = ("DROP TABLE legacy_notes;\nALTER TABLE customers RENAME TO legacy_notes;\n"
             "DROP TABLE legacy_notes;")
SWAPPED = ("ALTER TABLE customers RENAME COLUMN fax TO fax_old;\n"
           "ALTER TABLE customers RENAME COLUMN name TO fax;\n"
           "ALTER TABLE customers DROP COLUMN fax;")


def test_a_table_dropped_under_a_new_name_is_named_by_its_old_one() -> None:
    assert destructive_findings(LAUNDERED) == [
        "DROP TABLE legacy_notes", "ALTER TABLE customers RENAME TO legacy_notes",
        "DROP TABLE customers (renamed to legacy_notes at statement 2)"]


def test_a_column_dropped_under_a_swapped_name_is_named_by_its_old_one() -> None:
    assert destructive_findings(SWAPPED) == [
        "ALTER TABLE customers RENAME COLUMN fax TO fax_old",
        "ALTER TABLE customers RENAME COLUMN name TO fax",
        "ALTER TABLE customers DROP COLUMN name (renamed to fax at statement 2)"]


def test_names_fold_case_and_renames_add_up() -> None:
    assert findings(['ALTER TABLE "Customers" RENAME TO people', "ALTER TABLE main.People "
                     "RENAME TO [folk]", "ALTER TABLE FOLK RENAME COLUMN Name TO n",
                     "ALTER TABLE folk RENAME n TO m", "ALTER TABLE folk DROP m"]) == [
        "ALTER TABLE Customers RENAME TO people",
        "ALTER TABLE Customers (renamed to people at statement 1) RENAME TO folk",
        "ALTER TABLE Customers (renamed to people at statement 1, renamed to folk at "
        "statement 2) RENAME COLUMN Name TO n",
        "ALTER TABLE Customers (renamed to people at statement 1, renamed to folk at "
        "statement 2) RENAME COLUMN Name (renamed to n at statement 3) TO m",
        "ALTER TABLE Customers (renamed to people at statement 1, renamed to folk at "
        "statement 2) DROP COLUMN Name (renamed to n at statement 3, renamed to m at "
        "statement 4)"]


def test_a_name_renamed_many_times_is_one_bounded_line() -> None:
    script = ["ALTER TABLE customers RENAME TO t1", *(
        f"ALTER TABLE t{i} RENAME TO t{i + 1}" for i in range(1, 500)), "DROP TABLE t500"]
    found = findings(script)
    assert found[-1] == ("DROP TABLE customers (renamed to t1 at statement 1, 498 more "
                         "renames, renamed to t500 at statement 500)")
    assert len(found) == 501 and max(len(f) for f in found) < 140


def test_a_schema_name_resolves_as_sqlite_resolves_it() -> None:
    assert findings(["ALTER TABLE main.customers RENAME TO people", "DROP TABLE main.people",
                     "CREATE TEMP TABLE legacy_notes (a)", "ALTER TABLE legacy_notes RENAME "
                     "TO scratch", "DROP TABLE main.legacy_notes", "DROP TABLE scratch"]) == [
        "ALTER TABLE main.customers RENAME TO people",
        "DROP TABLE main.customers (renamed to people at statement 1)",
        "ALTER TABLE temp.legacy_notes (created at statement 3) RENAME TO scratch",
        "DROP TABLE main.legacy_notes",  # the database's own, not the script's TEMP one
        "DROP TABLE temp.legacy_notes (created at statement 3, renamed to scratch at "
        "statement 4)"]


def test_a_rewrite_through_a_new_table_names_the_copy_and_the_drop() -> None:
    assert findings([
        "CREATE TABLE c2 (id INTEGER PRIMARY KEY, name TEXT)",
        "INSERT INTO c2 (id, name) SELECT id, name FROM customers",
        "DROP TABLE customers", "ALTER TABLE c2 RENAME TO customers",
        "ALTER TABLE customers ADD COLUMN fax TEXT", "ALTER TABLE customers DROP COLUMN fax",
        "DROP TABLE customers"]) == [
        "INSERT INTO c2 (created at statement 1), copying from customers",
        "DROP TABLE customers",
        "ALTER TABLE c2 (created at statement 1) RENAME TO customers",
        "ALTER TABLE c2 (created at statement 1, renamed to customers at statement 4) "
        "DROP COLUMN fax (added at statement 5)",
        "DROP TABLE c2 (created at statement 1, renamed to customers at statement 4)"]


@pytest.mark.parametrize(("statement", "finding"), [
    ("CREATE TABLE keep AS SELECT * FROM customers c JOIN legacy_notes l ON c.id = l.id, "
     "orders WHERE 1", "CREATE TABLE keep, copying from customers, legacy_notes, orders"),
    ("INSERT INTO t VALUES ((SELECT name FROM (customers JOIN x USING (id))))",
     "INSERT INTO t, copying from customers, x"),
    ("INSERT INTO t SELECT a FROM json_each('[1]') WHERE a IS NOT DISTINCT FROM b", None),
    ("CREATE TABLE t AS SELECT 1", None),
    ("INSERT OR REPLACE INTO t VALUES (1)", "INSERT INTO t, overwriting rows"),
    ("REPLACE INTO t VALUES (1)", "INSERT INTO t, overwriting rows"),
    ("INSERT INTO t VALUES (1) ON CONFLICT DO UPDATE SET a = 2",
     "INSERT INTO t, overwriting rows"),
    ("INSERT OR IGNORE INTO t VALUES (1) ON CONFLICT DO NOTHING", None),
    ("UPDATE customers SET name = 'x', (fax, id) = (1, 2)",
     "UPDATE customers SET name, fax, id (every row: no WHERE)"),
    ("UPDATE OR IGNORE customers AS c SET name = (SELECT 1 FROM t WHERE 1) WHERE id = 1",
     "UPDATE customers SET name"),
    ("DELETE FROM customers", "DELETE FROM customers (every row: no WHERE)"),
    ("DELETE FROM customers WHERE id IN (SELECT id FROM x)", "DELETE FROM customers"),
    ("DELETE FROM customers RETURNING (SELECT 1 WHERE 1)",
     "DELETE FROM customers (every row: no WHERE)"),
    ("TRUNCATE TABLE customers", "TRUNCATE TABLE customers"),
    ("DROP TABLE IF EXISTS main.customers", "DROP TABLE main.customers"),
    ("DROP VIEW v", "DROP VIEW v"), ("DROP INDEX IF EXISTS ix", "DROP INDEX ix"),
    ("ALTER TABLE customers DROP COLUMN fax", "ALTER TABLE customers DROP COLUMN fax"),
    ("ALTER TABLE customers ADD COLUMN phone TEXT", None),
    ("CREATE UNIQUE INDEX IF NOT EXISTS ix ON customers (name)", None),
    ("CREATE TEMP VIEW v AS SELECT * FROM customers", None), ("SELECT 1", None),
])
def test_each_rule(statement: str, finding: str | None) -> None:
    assert findings([statement]) == ([finding] if finding else [])


def test_a_name_that_reads_like_a_finding_is_quoted() -> None:
    assert findings(['DROP TABLE "x (renamed to y at statement 1)"', "DROP TABLE 'odd name'"]
                    ) == ['DROP TABLE "x (renamed to y at statement 1)"',
                          'DROP TABLE "odd name"']


def test_a_statement_after_forty_comment_lines_is_its_own_finding() -> None:
    tail = "".join(f"-- note {i}\n" for i in range(40)) + "DROP TABLE customers;"
    assert findings(["DROP TABLE legacy_notes;", tail]) == [
        "DROP TABLE legacy_notes", "DROP TABLE customers"]


@pytest.mark.parametrize("statement", [
    "INSERT INTO notes (body) VALUES ('x''); DROP TABLE customers; --')",
    "/* DROP TABLE customers; */ CREATE TABLE audit (id INTEGER PRIMARY KEY)",
    "-- DELETE FROM customers\nALTER TABLE customers ADD COLUMN phone TEXT",
    "CREATE INDEX ix_name ON customers (name) -- TRUNCATE TABLE customers",
    'CREATE TABLE "odd; DROP TABLE customers" (a)',
])
def test_a_statement_in_a_string_or_comment_is_not_a_finding(statement: str) -> None:
    assert findings([statement]) == []


@pytest.mark.parametrize(("statement", "why"), [
    ("garbage here", "no rule for garbage"), ("DROP TABLE", "expected a name, found the end"),
    ("))((", 'no rule for ")"'), ("PRAGMA writable_schema = 1", "no rule for PRAGMA"),
    ("ATTACH DATABASE 'x.db' AS x", "no rule for ATTACH"), ("COMMIT", "no rule for COMMIT"),
    ("CREATE TRIGGER wipe AFTER INSERT ON t BEGIN DELETE FROM customers; END",
     "no rule for CREATE TRIGGER"),
    ("WITH x AS (SELECT 1) DELETE FROM customers", "no rule for WITH"),
    ("DROP TABLE a; DROP TABLE customers", "more than one statement in one"),
    ("SELECT 1; DROP TABLE customers", "more than one statement in one"),
    ("ALTER TABLE customers RENAME TO x y", "expected the end, found y"),
    ("DELETE FROM 'customers", "a quote that is never closed"),
])
def test_a_statement_it_cannot_follow_is_flagged_never_harmless(statement: str, why: str
                                                                ) -> None:
    assert findings(["SELECT 1", statement]) == [
        f"statement 2 not understood: {why}; treated as destructive"]


@pytest.mark.parametrize("end", ["COMMIT", "END", "ROLLBACK", "SAVEPOINT s; RELEASE s"])
def test_a_dry_run_cannot_end_its_own_transaction(tmp_path: Path, end: str) -> None:
    # Before: a dry run of `...; COMMIT; DROP TABLE customers;` (needing no approval)
    # committed, then dropped the table outside any transaction.
    create_example_shop(tmp_path / "databases")
    shop = tmp_path / "databases" / "shop.sqlite"
    with contextlib.closing(sqlite3.connect(shop)) as db:
        before = list(db.iterdump())
    with contextlib.closing(sqlite3.connect(tmp_path / "tools.sqlite")) as tools:
        out = inspect_migration(tools, Inspect(database="shop", script=(
            f"CREATE TABLE audit (id INTEGER);\n{end};\nDROP TABLE customers;")))
    assert not out["ok"] and out["error"] == "DatabaseError: not authorized"
    assert out["findings"][0].startswith("statement 2 not understood: no rule for ")
    with contextlib.closing(sqlite3.connect(shop)) as db:
        assert list(db.iterdump()) == before
