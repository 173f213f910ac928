"""The tools' world: a real SQLite database with a small seeded data set.

Side-effecting tools record every idempotency key they have acted on, in the
same transaction as the effect, so an activity retried or re-run after a crash
returns the first result instead of acting twice.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tower.temporal import wal

from . import migrations, orders

SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, plan TEXT NOT NULL,
    status TEXT NOT NULL, balance_cents INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS invoices (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id),
    amount_cents INTEGER NOT NULL, status TEXT NOT NULL, issued_on TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY, invoice_id TEXT, amount_cents INTEGER NOT NULL, reason TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT, subject TEXT NOT NULL, body TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS signups (
    account_id TEXT PRIMARY KEY, company TEXT NOT NULL, idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, to_addr TEXT NOT NULL, subject TEXT NOT NULL,
    body TEXT NOT NULL, idempotency_key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS blocked_companies (name TEXT PRIMARY KEY, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, url TEXT NOT NULL, summary TEXT NOT NULL);
"""

SEED_ACCOUNTS = [
    ("ACC-1001", "Ada Lovelace", "ada@example.com", "pro", "active", 0),
    ("ACC-1002", "Grace Hopper", "grace@example.com", "free", "suspended", -4200),
    ("ACC-1003", "Alan Turing", "alan@example.com", "team", "active", 1500),
]
SEED_INVOICES = [
    ("INV-2001", "ACC-1001", 4900, "paid", "2026-11-01"),
    ("INV-2002", "ACC-1001", 4900, "paid", "2026-10-01"),
    ("INV-2003", "ACC-1002", 4200, "overdue", "2026-11-01"),
    ("INV-2004", "ACC-1003", 240000, "paid", "2026-11-15"),  # large enough for a gated refund
]
SEED_DOCS = [
    ("DOC-1", "Resetting your password", "Open Settings > Security and choose Reset password."),
    ("DOC-2", "Login fails with error 500", "Clear cookies; if it persists our status page shows "
     "incidents. Error 500 on login is usually a stale session."),
    ("DOC-3", "Exporting data", "Use Settings > Data > Export to download a CSV of your data."),
]

SEED_BLOCKED_COMPANIES = [("Shady Holdings", "on the sanctions list")]
SEED_SOURCES = [
    ("SRC-1", "Durable execution explained", "https://temporal.io/blog/durable-execution",
     "Durable execution persists every step of a workflow in an event history so that a crashed "
     "process resumes exactly where it stopped, replaying recorded results instead of redoing "
     "side effects."),
    ("SRC-2", "Finite state machines for LLM agents", "https://example.org/fsm-agents",
     "Modelling an agent as a finite state machine makes its control flow explicit: the model "
     "reasons inside a state while code owns the transitions, which can be validated and drawn."),
    ("SRC-3", "Idempotency keys in payment APIs", "https://example.org/idempotency",
     "An idempotency key lets a client retry a request safely: the server records the key with "
     "the first result and returns that result for every retry."),
    ("SRC-4", "Event sourcing and audit logs", "https://example.org/event-sourcing",
     "Event sourcing stores every change as an immutable event; the current state is a fold "
     "over the log, which doubles as a complete audit trail and a replay tape for debugging."),
]


# Tower's record of effects (tower.effects), made here with the rest of the schema so a
# worker starting on a seeded database never needs the write lock.
EFFECTS = """
CREATE TABLE IF NOT EXISTS tower_effects (
    idempotency_key TEXT PRIMARY KEY, epoch BIGINT NOT NULL, tool TEXT, arguments TEXT,
    result TEXT);
"""


def open_db(path: str | Path) -> sqlite3.Connection:
    """Open the database ``connect`` made, without touching its schema."""
    db = sqlite3.connect(str(path), timeout=30)
    db.row_factory = sqlite3.Row
    return db


def connect(path: str | Path) -> sqlite3.Connection:
    """Open the tools' database, creating and seeding it on first use."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(str(path), timeout=30)
    db.row_factory = sqlite3.Row
    wal(db)
    db.executescript(SCHEMA + orders.SCHEMA + EFFECTS)  # CREATE ... IF NOT EXISTS
    if _seeded(db):  # reads only: a worker starting while a tool writes does not wait
        return db
    # Each seed is a check then an insert: under the write lock, one process at a time.
    # Two workers started at once on a new database both saw it empty and both seeded it
    # (UNIQUE constraint failed: accounts.id, and the second worker exited).
    db.execute("BEGIN IMMEDIATE")
    try:
        created = _seed(db)
        db.commit()
    except BaseException:
        db.rollback()
        raise
    if created:
        migrations.create_example_databases(path)
    return db


def _seeded(db: sqlite3.Connection) -> bool:
    """Whether every seed below is there already."""
    return not any(_empty(db, table) for table in ("accounts", "sources", "products"))


def _empty(db: sqlite3.Connection, table: str) -> bool:
    return not db.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]


def _seed(db: sqlite3.Connection) -> bool:
    """Seed what is empty (in the caller's transaction); whether the database was new."""
    created = _empty(db, "accounts")
    if created:
        db.executemany("INSERT INTO accounts VALUES (?,?,?,?,?,?)", SEED_ACCOUNTS)
        db.executemany("INSERT INTO invoices VALUES (?,?,?,?,?)", SEED_INVOICES)
        db.executemany("INSERT INTO docs VALUES (?,?,?)", SEED_DOCS)
    # Seeded separately so a database created by an older version gets them too.
    if _empty(db, "sources"):
        db.executemany("INSERT OR IGNORE INTO blocked_companies VALUES (?,?)",
                       SEED_BLOCKED_COMPANIES)
        db.executemany("INSERT OR IGNORE INTO sources VALUES (?,?,?,?)", SEED_SOURCES)
    orders.seed(db)
    return created
