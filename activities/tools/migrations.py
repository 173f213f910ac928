"""Migration tools: inspect, fingerprint and apply SQL on a real SQLite database.

The target is a named example database beside the tools' database
(``databases/<name>.sqlite``). With the tools' database on PostgreSQL, the targets are
files of the worker's own data folder (``.tower/databases/<name>.sqlite``; see
``databases_dir``): each host migrates its own copy — an example of the agent, not a
deployment's shared application database.
Every statement of a migration runs in one transaction: all of it applies, or none.
``destructive_findings`` is the deterministic check (``sql_findings``, on the statements as
SQLite executes them); the model's opinion can add to it, never clear it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tower.effects import Authority

from .spec import Db, EffectCall, EffectRefused, NoEffect, tool
from .sql_findings import findings

LEDGER = "_tower_migrations"  # applied migrations, by idempotency key; not part of the schema
NAME = r"^[a-z][a-z0-9_]{0,39}$"

def split_statements(script: str) -> list[str]:
    """Complete SQL statements, in order (``sqlite3.complete_statement`` knows quoting)."""
    out, buf = [], ""
    for char in script:
        buf += char
        if char == ";" and sqlite3.complete_statement(buf):
            if _strip(buf).strip(" ;"):
                out.append(buf.strip())
            buf = ""
    if _strip(buf).strip():
        out.append(buf.strip())  # an unterminated last statement still runs (and may fail)
    return out


def run_script(db: sqlite3.Connection, script: str) -> None:
    """Every statement, inside the transaction the caller opened and will end itself."""
    db.set_authorizer(_inside_the_transaction)
    try:
        for stmt in split_statements(script):
            db.execute(stmt)
    finally:
        db.set_authorizer(None)


def _inside_the_transaction(action: int, *_: object) -> int:
    """SQLite refuses a statement of the script that would end the caller's transaction
    (COMMIT, ROLLBACK, a savepoint's) or attach a file: else a dry run's ``COMMIT;`` would
    keep the statements before it, and run the ones after it outside any transaction."""
    return sqlite3.SQLITE_DENY if action in (
        sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT, sqlite3.SQLITE_ATTACH,
        sqlite3.SQLITE_DETACH) else sqlite3.SQLITE_OK


def _strip(text: str) -> str:
    """The statement without comments and string literals (to skip empty chunks)."""
    text = re.sub(r"--[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"'(?:[^']|'')*'", "''", text)
    return re.sub(r"\s+", " ", text).strip()


def destructive_findings(script: str) -> list[str]:
    """One line per statement that can lose or move data, or that the check cannot follow
    (``DROP TABLE customers (renamed to legacy_notes at statement 2)``)."""
    return findings(split_statements(script))


def fingerprint(db: sqlite3.Connection) -> str:
    rows = db.execute(
        "SELECT type, name, tbl_name, COALESCE(sql, '') FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' AND name != ? ORDER BY type, name", (LEDGER,)).fetchall()
    return hashlib.sha256(repr([tuple(r) for r in rows]).encode()).hexdigest()[:16]


# The application database the examples and the demo migrate, created with a new tools
# database so `tower run migration --input '{"database": "shop", ...}'` works on a fresh setup.
EXAMPLE_SHOP = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, fax TEXT);
CREATE TABLE legacy_notes (id INTEGER PRIMARY KEY, body TEXT);
INSERT INTO customers (name, fax) VALUES ('Ada', '555-0100'), ('Grace', NULL);
INSERT INTO legacy_notes (body) VALUES ('call back on Monday');
"""


def create_example_databases(tools_path: str | Path) -> None:
    """Create ``databases/shop.sqlite`` beside the tools' database unless it exists."""
    create_example_shop(Path(tools_path).parent / "databases")


def create_example_shop(folder: Path) -> None:
    """Create ``shop.sqlite`` in ``folder`` unless it exists."""
    path = folder / "shop.sqlite"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Built aside, then linked into place: two processes starting at once make one shop.
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.unlink(missing_ok=True)  # left by a process that died here
    with contextlib.closing(sqlite3.connect(aside)) as db:
        db.executescript(EXAMPLE_SHOP)
    try:
        os.link(aside, path)  # fails if the other process linked its shop first
    except FileExistsError:
        pass
    finally:
        aside.unlink()


def databases_dir(tools_db: Db) -> Path:
    """Where the example databases are: beside a SQLite tools' database; with the tools on
    PostgreSQL, the folder the worker named (``db.PgTools.databases``: this host's own)."""
    if isinstance(tools_db, sqlite3.Connection):
        main = tools_db.execute("PRAGMA database_list").fetchone()[2]
        return Path(main).parent / "databases"
    return Path(tools_db.databases)  # type: ignore[attr-defined]


def target(tools_db: Db, name: str) -> sqlite3.Connection | None:
    """Open the named database; None if it does not exist (a migration never creates one)."""
    path = databases_dir(tools_db) / f"{name}.sqlite"
    if not path.is_file():
        return None
    return sqlite3.connect(str(path), timeout=30, isolation_level=None)  # we manage BEGIN


class Inspect(BaseModel):
    database: str = Field(pattern=NAME)
    script: str = Field(min_length=1, max_length=20_000)


class Fingerprint(BaseModel):
    database: str = Field(pattern=NAME)


class Apply(Inspect):
    expected_fingerprint: str = Field(pattern=r"^[0-9a-f]{16}$")


@tool(description="Dry-run a migration script and list destructive statements.")
def inspect_migration(db: Db, args: Inspect) -> dict[str, Any]:
    """Dry-run the script in a transaction that is rolled back; report what it would do."""
    conn = target(db, args.database)
    if conn is None:
        return {"ok": False, "error": f"no database named {args.database!r}"}
    try:
        before = fingerprint(conn)
        statements = split_statements(args.script)
        conn.execute("BEGIN")
        try:
            run_script(conn, args.script)
            error = ""
        except sqlite3.Error as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.execute("ROLLBACK")
        findings = destructive_findings(args.script)
        return {"ok": not error, "error": error, "statements": len(statements),
                "findings": findings, "destructive": bool(findings), "fingerprint": before}
    finally:
        conn.close()


@tool(description="A short hash of a database's schema.")
def schema_fingerprint(db: Db, args: Fingerprint) -> dict[str, Any]:
    conn = target(db, args.database)
    if conn is None:
        return {"error": f"no database named {args.database!r}"}
    try:
        return {"fingerprint": fingerprint(conn)}
    finally:
        conn.close()


def script_digest(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()[:16]


def only_the_approved_script(tools_db: Db, args: Apply,
                             authority: Authority) -> None:
    """A destructive script applies only with an approval, and only the script approved."""
    approved = authority.approved.get("script")
    if authority.decision_id and approved != args.script:
        asked = script_digest(args.script)
        raise EffectRefused("not_the_approved_script", "the script differs from the one approved "
                          f"({script_digest(str(approved))} approved, {asked} asked)")
    findings = destructive_findings(args.script)
    if findings and not authority.decision_id:
        raise EffectRefused("unapproved_destructive", "a destructive migration needs an "
                          f"approval: {findings[0]}")


@tool(side_effect=True,
      description="Apply a migration in one transaction if the schema is unchanged.")
def apply_migration(db: Db, args: Apply, call: EffectCall) -> dict[str, Any]:
    """Apply all statements in one transaction, once per key, on the schema analysed."""
    only_the_approved_script(db, args, call.authority)
    conn = target(db, args.database)
    if conn is None:
        raise NoEffect({"applied": False, "error": f"no database named {args.database!r}"})
    try:
        conn.execute("BEGIN IMMEDIATE")  # no other writer between the check and the change
        try:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {LEDGER} (idempotency_key TEXT PRIMARY KEY,"
                         " fingerprint_before TEXT NOT NULL, fingerprint_after TEXT NOT NULL)")
            done = conn.execute(f"SELECT fingerprint_after FROM {LEDGER} WHERE idempotency_key=?",
                                (call.key,)).fetchone()
            if done is not None:
                conn.execute("ROLLBACK")
                return {"applied": True, "fingerprint": done[0], "repeat": True}
            now = fingerprint(conn)
            if now != args.expected_fingerprint:
                conn.execute("ROLLBACK")
                raise NoEffect({"applied": False, "error": f"schema changed since analysis "
                                f"({args.expected_fingerprint} -> {now}); nothing applied"})
            run_script(conn, args.script)
            after = fingerprint(conn)
            conn.execute(f"INSERT INTO {LEDGER} VALUES (?,?,?)", (call.key, now, after))
            conn.execute("COMMIT")
            return {"applied": True, "fingerprint": after}
        except sqlite3.Error as exc:
            conn.execute("ROLLBACK")
            raise NoEffect({"applied": False,
                            "error": f"{type(exc).__name__}: {exc}; rolled back"}) from exc
    finally:
        conn.close()


TOOLS = [inspect_migration, schema_fingerprint, apply_migration]
