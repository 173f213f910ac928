"""The message store in PostgreSQL: every worker host reads what any other stored
(``TOWER_STORE_URL`` or ``TOWER_MESSAGES`` = ``postgresql://...``).

psycopg 3 is an optional extra (``pip install 'tower[postgres]'``). The same rows as the
SQLite store, in ``tower_``-prefixed tables beside the stream store's. One connection per
process under a lock, made again after the server went away: a store unreachable for a
while fails attempts (retried), then serves them again.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from tower.activities.messages import MessageStore
from tower.activities.stores import redact, store_unavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tower_messages (
    ref TEXT PRIMARY KEY, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tower_windows (ref TEXT PRIMARY KEY, refs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tower_message_owners (owner TEXT NOT NULL, ref TEXT NOT NULL,
    PRIMARY KEY (owner, ref));
CREATE INDEX IF NOT EXISTS tower_message_owners_ref ON tower_message_owners (ref);
"""


class PostgresMessages(MessageStore):
    MESSAGES, WINDOWS, OWNERS = "tower_messages", "tower_windows", "tower_message_owners"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise RuntimeError("the message store names PostgreSQL but psycopg is not "
                               "installed: pip install 'tower[postgres]'") from None
        self._psycopg = psycopg
        self.url = url
        self._lock = threading.Lock()
        self._db: Any = None
        with self._lock:
            db = self._conn()
            with db.transaction():
                # Two workers starting at once: one creates, the other waits for it.
                db.execute("SELECT pg_advisory_xact_lock(7246131)")
                db.execute(_SCHEMA)

    def __str__(self) -> str:
        return f"message store {redact(self.url)}"

    def _conn(self) -> Any:
        if self._db is None or self._db.closed or self._db.broken:
            self._db = self._psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        return self._db

    def _write(self, statements: Sequence[tuple[str, Sequence[Sequence[Any]]]]) -> None:
        try:
            with self._lock:
                db = self._conn()
                with db.transaction(), db.cursor() as cur:
                    for sql, rows in statements:
                        if rows:
                            cur.executemany(sql.replace("?", "%s"), rows)
        except self._psycopg.OperationalError as exc:
            raise store_unavailable(str(self), exc) from None

    def _query(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            with self._lock:
                rows: list[tuple[Any, ...]] = self._conn().execute(
                    sql.replace("?", "%s"), list(args)).fetchall()
                return rows
        except self._psycopg.OperationalError as exc:
            raise store_unavailable(str(self), exc) from None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
