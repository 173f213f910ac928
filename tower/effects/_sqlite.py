"""Effects on a SQLite database (the standard library's ``sqlite3``)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TypeVar

from tower.effects._ledger import TABLE, waited

T = TypeVar("T")
LOCK_POLL_MS = 200  # how long one BEGIN waits before the attempt heartbeats again


class SQLite:
    """A SQLite database file that effects commit in: each effect is one ``BEGIN IMMEDIATE``
    transaction (the write lock taken before anything is read), so the tool's invariant, its
    write and Tower's record see no other writer. Rows are ``sqlite3.Row``.

    Args:
        path: the database file (created, with its folder, if missing).
        schema: the tool's own ``CREATE TABLE IF NOT EXISTS ...`` statements, run once.
    """

    for_update = ""  # one lock for the whole database: rows need no lock of their own

    def __init__(self, path: str | Path, *, schema: str = "") -> None:
        self.path = Path(path)
        self.schema = schema
        self._ready = False
        self._setup = threading.Lock()

    def __repr__(self) -> str:
        return f"SQLite({str(self.path)!r})"

    def describe(self) -> str:
        return f"local file {self.path}"

    def connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                             check_same_thread=False)
        db.row_factory = sqlite3.Row
        return db

    def run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(db)`` in one write transaction: committed if it returns, else rolled back."""
        self._ensure()
        with closing(self.connect()) as db:
            db.execute(f"PRAGMA busy_timeout={LOCK_POLL_MS}")
            while not _begin(db):
                waited("waiting for the database's write lock")
            try:
                out = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work(db)`` for a tool that only reads: no write lock, nothing committed."""
        self._ensure()
        with closing(self.connect()) as db:
            return work(db)

    def _ensure(self) -> None:
        """Create Tower's table and the tool's schema once per process, reading first: a worker
        starting while a tool holds the write lock does not wait for it."""
        with self._setup:
            if self._ready:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self.connect()) as db:
                if not _has_table(db) or self.schema:
                    db.executescript(f"{TABLE};\n{self.schema}")
            self._ready = True


def _begin(db: sqlite3.Connection) -> bool:
    try:
        db.execute("BEGIN IMMEDIATE")
        return True
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise
        return False


def _has_table(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE name='tower_effects'"
                      ).fetchone() is not None

