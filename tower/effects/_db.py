"""The databases effects commit in: a SQLite file (the standard library's ``sqlite3``) or
PostgreSQL (psycopg 3). Each creates Tower's table and the tool's schema once per process."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, SupportsIndex, TypeVar, overload

from tower.effects._tool import TABLE, waited

T = TypeVar("T")
LOCK_POLL_MS = 200  # how long one BEGIN waits before the attempt heartbeats again
# Serialization failure, deadlock, lock not available (lock_timeout): try again.
AGAIN = {"40001", "40P01", "55P03"}
SETUP_LOCK = 0x70E7  # an advisory lock: two workers creating the tables at once


class _Database:
    """What both databases share: the tool's own ``schema`` (``CREATE TABLE IF NOT EXISTS
    ...`` statements), run once with Tower's table (``_create``)."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self._ready = False
        self._setup = threading.Lock()

    def _ensure(self) -> None:
        with self._setup:
            if not self._ready:
                self._create()
                self._ready = True

    def _create(self) -> None:
        raise NotImplementedError


class SQLite(_Database):
    """A SQLite database file that effects commit in: each effect is one ``BEGIN IMMEDIATE``
    transaction (the write lock taken before anything is read), so the tool's invariant, its
    write and Tower's record see no other writer. Rows are ``sqlite3.Row``.

    Args:
        path: the database file (created, with its folder, if missing).
        schema: the tool's own ``CREATE TABLE IF NOT EXISTS ...`` statements, run once.
    """

    for_update = ""  # one lock for the whole database: rows need no lock of their own

    def __init__(self, path: str | Path, *, schema: str = "") -> None:
        super().__init__(schema)
        self.path = Path(path)

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

    def _create(self) -> None:
        """Reading first: a worker starting while a tool holds the write lock does not wait
        for it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self.connect()) as db:
            if not _has_table(db) or self.schema:
                db.executescript(f"{TABLE};\n{self.schema}")


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


class Row(tuple[Any, ...]):
    """A row read as a ``sqlite3.Row`` reads (``row[0]``, ``row["column"]``, ``dict(row)``),
    and still a tuple, so one tool's code runs on both databases."""

    _names: tuple[str, ...]

    def __new__(cls, values: Iterable[Any], names: tuple[str, ...]) -> Row:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def keys(self) -> list[str]:
        return list(self._names)

    @overload
    def __getitem__(self, key: SupportsIndex | str) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, key: SupportsIndex | slice | str) -> Any:
        if isinstance(key, str):
            try:
                return super().__getitem__(self._names.index(key))
            except ValueError:
                raise IndexError(f"no column named {key!r}") from None  # as sqlite3.Row
        return super().__getitem__(key)


def row_factory(cursor: Any) -> Callable[[Sequence[Any]], Row]:
    names = tuple(column.name for column in cursor.description or ())
    return lambda values: Row(values, names)


class PgConnection:
    """The tool's ``db`` on PostgreSQL: ``?`` placeholders and ``Row``s, as with sqlite3;
    ``raw`` is the psycopg connection."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(qmark_to_format(sql), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cursor = self.raw.cursor()
        cursor.executemany(qmark_to_format(sql), rows)
        return cursor


class Postgres(_Database):
    """A PostgreSQL database that effects commit in: each effect is one SERIALIZABLE
    transaction, tried again whole when PostgreSQL cannot serialize it (the DBOS default).

    Args:
        dsn: a libpq connection string or URL.
        schema: the tool's own ``CREATE TABLE IF NOT EXISTS ...`` statements, run once.
    """

    for_update = " FOR UPDATE"

    def __init__(self, dsn: str, *, schema: str = "") -> None:
        super().__init__(schema)
        self.dsn = dsn

    def __repr__(self) -> str:
        return "Postgres(...)"  # the DSN may carry a password

    def describe(self) -> str:
        from tower.activities.stores import redact

        return f"PostgreSQL {redact(self.dsn)}"

    def connect(self) -> Any:
        import psycopg  # only a project on PostgreSQL needs it (the `postgres` extra)

        return psycopg.connect(self.dsn, row_factory=row_factory)

    def run(self, work: Callable[[PgConnection], T]) -> T:
        """``work(db)`` in one serializable transaction, tried again when PostgreSQL asks."""
        import psycopg

        self._ensure()
        with self.connect() as raw:
            raw.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
            while True:
                try:
                    with raw.transaction():
                        raw.execute("SET LOCAL lock_timeout = '200ms'")
                        return work(PgConnection(raw))
                except psycopg.errors.Error as exc:
                    if exc.sqlstate not in AGAIN:
                        raise
                waited("waiting for PostgreSQL to serialize the effect")

    def _create(self) -> None:
        with self.connect() as raw, raw.transaction():
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
            raw.execute(TABLE)
            if self.schema:
                raw.execute(self.schema)


def qmark_to_format(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (a literal ``%`` to ``%%``), outside quotes."""
    out, quote = [], ""
    for char in sql:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "?":
            out.append("%s")
            continue
        out.append("%%" if char == "%" else char)
    return "".join(out)
