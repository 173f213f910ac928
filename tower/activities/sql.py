"""The stores' one way to their database: a SQLite file (one host's) or a PostgreSQL URL
(every host's), with ``?`` placeholders on both.

One connection per store and process, under a lock. PostgreSQL's is made again after the
server went away, so a store unreachable for a while fails those calls, then serves again.
psycopg 3 is the optional ``postgres`` extra.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tower.activities.stores import is_url, redact
from tower.extras import require

Execute = Callable[..., Any]  # (sql, args=()) -> a cursor


class Sql:
    """The database at ``spec``. ``schema`` (``CREATE ... IF NOT EXISTS``) is run when it is
    opened, under PostgreSQL advisory lock ``lock_id`` (two workers starting at once: one
    creates, the other waits). ``create=False`` (a client) never makes a local file: until
    a worker makes it, there is nothing to read."""

    def __init__(self, spec: str, schema: str, *, lock_id: int, create: bool = True,
                 durable: bool = True) -> None:
        self.spec, self.pg = spec, is_url(spec)
        self.schema, self.lock_id, self.create, self.durable = schema, lock_id, create, durable
        self.errors: tuple[type[Exception], ...] = (sqlite3.OperationalError,)
        if self.pg:
            require("postgres", f"the store at {redact(spec)}")
            import psycopg

            self._psycopg = psycopg
            self.errors += (psycopg.OperationalError,)
        self._lock = threading.Lock()
        self._db: Any = None
        if create:
            with self._lock:
                self._open()

    def __str__(self) -> str:
        return redact(self.spec)

    def _open(self) -> Any:
        if self.pg:
            if self._db is None or self._db.closed or self._db.broken:
                server = self._psycopg.connect(self.spec, autocommit=True, connect_timeout=10)
                with server.transaction():
                    server.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_id,))
                    server.execute(self.schema)
                self._db = server
        elif self._db is None and (self.create or Path(self.spec).exists()):
            Path(self.spec).parent.mkdir(parents=True, exist_ok=True)
            local = sqlite3.connect(self.spec, timeout=30, check_same_thread=False,
                                    isolation_level=None)
            local.execute("PRAGMA busy_timeout=30000")
            wal(local)
            if not self.durable:
                local.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints
            local.executescript(self.schema)
            self._db = local
        return self._db

    def _execute(self, db: Any) -> Execute:
        if self.pg:
            return lambda sql, args=(): db.execute(sql.replace("?", "%s"), list(args))
        return lambda sql, args=(): db.execute(sql, args)

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """What ``sql`` selects ([] from a local file not made yet)."""
        with self._lock:
            db = self._open()
            return [] if db is None else list(self._execute(db)(sql, args).fetchall())

    @contextmanager
    def transaction(self) -> Iterator[Execute]:
        """One transaction (on SQLite, holding the write lock from its start); yields the
        ``execute(sql, args)`` that runs in it."""
        with self._lock:
            db = self._open()
            assert db is not None, "a store opened with create=False only reads"
            if self.pg:
                with db.transaction():
                    yield self._execute(db)
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                yield self._execute(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def wal(db: sqlite3.Connection, tries: int = 200) -> None:
    """Put the file in SQLite's write-ahead log mode, for a file several processes open
    (workers starting together): readers never block the writer. The switch needs the file
    to itself and does not wait (no busy timeout), so a process opening it at the same moment
    makes it fail: tried again, for up to ~10 s."""
    for attempt in range(tries):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or attempt == tries - 1:
                raise
            time.sleep(0.05)
