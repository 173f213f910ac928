"""Effects on a PostgreSQL database (psycopg 3)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, SupportsIndex, TypeVar, overload

from tower.effects._ledger import TABLE, waited

T = TypeVar("T")
# Serialization failure, deadlock, lock not available (lock_timeout): try again.
AGAIN = {"40001", "40P01", "55P03"}
SETUP_LOCK = 0x70E7  # an advisory lock: two workers creating the tables at once


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


class Postgres:
    """A PostgreSQL database that effects commit in: each effect is one SERIALIZABLE
    transaction, tried again whole when PostgreSQL cannot serialize it (the DBOS default).

    Args:
        dsn: a libpq connection string or URL.
        schema: the tool's own ``CREATE TABLE IF NOT EXISTS ...`` statements, run once.
    """

    for_update = " FOR UPDATE"

    def __init__(self, dsn: str, *, schema: str = "") -> None:
        self.dsn = dsn
        self.schema = schema
        self._ready = False
        self._setup = threading.Lock()

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

    def _ensure(self) -> None:
        with self._setup:
            if self._ready:
                return
            with self.connect() as raw, raw.transaction():
                raw.execute("SELECT pg_advisory_xact_lock(%s)", (SETUP_LOCK,))
                raw.execute(TABLE)
                if self.schema:
                    raw.execute(self.schema)
            self._ready = True


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
