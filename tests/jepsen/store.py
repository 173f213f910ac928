"""Where the checker's refunds are made: the tools' SQLite file (as shipped), or a
PostgreSQL database (``World.pg``; the workers' ``JEPSEN_PG``) — the same ``issue_refund``
on ``tower.effects.Postgres``. Invoices go to both (the agent reads them from SQLite, the
tool's guard in its own transaction)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tower.effects._db import _begin

from .bounds import RPC_SECONDS, bounded, on_db
from .worker import PG_SCHEMA
from .world import World

INVOICE = "INSERT INTO invoices VALUES (?, 'ACC-1001', ?, 'paid', '2026-11-20')"
LOCK_WAIT = 1.0


def prepare_pg(dsn: str) -> None:
    """Tower's table and the refunds' schema, before any worker races to make them."""
    from tower.effects import Postgres

    Postgres(dsn, schema=PG_SCHEMA).run(lambda tx: None)


async def insert_invoice(world: World, invoice: str, total: int) -> None:
    if world.pg:
        await asyncio.to_thread(_pg, world.pg, INVOICE.replace("?", "%s"), (invoice, total))
    await on_db(world.db_path, lambda db: db.execute(INVOICE, (invoice, total)))


def refund_rows(source: Path | str, invoice: str) -> list[tuple[str, int, str]]:
    """(id, cents, idempotency key) of every refund of ``invoice``."""
    sql = "SELECT id, amount_cents, idempotency_key FROM refunds WHERE invoice_id=?"
    if isinstance(source, str):
        return [(r[0], int(r[1]), r[2]) for r in _pg(source, sql.replace("?", "%s"), (invoice,))]
    db = sqlite3.connect(source, timeout=10)
    try:
        return [(r[0], int(r[1]), r[2]) for r in db.execute(sql, (invoice,)).fetchall()]
    finally:
        db.close()


def refund_count(world: World) -> int:
    if world.pg:
        return int(_pg(world.pg, "SELECT COUNT(*) FROM refunds", ())[0][0])
    with sqlite3.connect(world.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM refunds").fetchone()[0])


def _pg(dsn: str, sql: str, params: tuple[Any, ...]) -> list[Any]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


async def _take_sqlite(db: sqlite3.Connection, seconds: float) -> bool:
    """The write lock within ``seconds`` (a worker's transaction lasts milliseconds), or not
    at all: another trial's lock fault holds it, and faults must not queue back to back (the
    database would stay locked for minutes). No busy wait inside SQLite: it would block the
    event loop, where another fault's holder must wake to let go."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not _begin(db):  # the ledger's own non-waiting BEGIN IMMEDIATE
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _take_pg(db: Any, seconds: float) -> bool:
    """The refunds' and Tower's tables locked against every reader and writer (what SQLite's
    write lock is to the tool), on the same terms: within ``seconds`` or not at all."""
    import psycopg

    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            await db.execute("BEGIN")
            await db.execute("LOCK TABLE refunds, tower_effects IN ACCESS EXCLUSIVE MODE NOWAIT")
            return True
        except psycopg.errors.LockNotAvailable:
            await db.execute("ROLLBACK")
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)


@asynccontextmanager
async def database_locked(world: World) -> AsyncIterator[bool]:
    """Hold the refunds' lock inside the block (True), unless another fault holds it
    already (False)."""
    if world.pg:
        import psycopg

        holder = await bounded("connecting to PostgreSQL", RPC_SECONDS,
                               psycopg.AsyncConnection.connect(world.pg, autocommit=True))
        try:
            yield await bounded("taking the refunds' lock", LOCK_WAIT + RPC_SECONDS,
                                _take_pg(holder, LOCK_WAIT))
        finally:
            await holder.close()  # rolls the open transaction back: the lock is free
        return
    lite = sqlite3.connect(world.db_path, timeout=0, isolation_level=None)
    try:
        yield await bounded("taking the tools' database lock", LOCK_WAIT + RPC_SECONDS,
                            _take_sqlite(lite, LOCK_WAIT))
    finally:
        lite.close()  # rolls the open transaction back: the lock is free

