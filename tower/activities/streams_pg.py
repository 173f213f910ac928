"""Runs' live streams in PostgreSQL: for workers and clients on different hosts, in the
database the production stack already runs (``TOWER_STREAMS=postgresql://...``).

psycopg 3 is an optional extra (``pip install 'tower[postgres]'``). One table of events
with per-stream offsets and unique keys, and one row per stream holding its last offset:
an append locks that row, so offsets are dense and in commit order, and a reader that
polls ``offset > last seen`` (an index range scan) never skips one committed late.
Readers poll (every 20–50 ms): no connection is held open per subscriber, which is what
LISTEN/NOTIFY would need; see docs/streaming.md.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from tower.contract.stream import StreamEvent

from .streams import READ_LIMIT, new_key

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tower_stream_heads (stream TEXT PRIMARY KEY, last BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS tower_stream_events (
    stream TEXT NOT NULL, "offset" BIGINT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (stream, "offset"), UNIQUE (stream, key));
"""


class PostgresStreams:
    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise RuntimeError("TOWER_STREAMS names PostgreSQL but psycopg is not installed: "
                               "pip install 'tower[postgres]'") from None
        self._psycopg, self.url = psycopg, url
        self._lock = threading.Lock()
        self._conn: Any = None
        with self._lock, self._db.transaction():
            # Two workers starting at once: one creates, the other waits for it.
            self._db.execute("SELECT pg_advisory_xact_lock(7246130)")
            self._db.execute(_SCHEMA)

    @property
    def _db(self) -> Any:
        """The connection (under the lock), made again after the server went away: a
        store unreachable for a while fails those appends and reads, then serves again."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self._psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        return self._conn

    def append(self, stream: str, events: Sequence[StreamEvent]) -> list[int]:
        offsets = []
        with self._lock, self._db.transaction():
            self._db.execute("INSERT INTO tower_stream_heads VALUES (%s, 0) "
                             "ON CONFLICT (stream) DO NOTHING", (stream,))
            (last,) = self._db.execute("SELECT last FROM tower_stream_heads WHERE stream = %s "
                                       "FOR UPDATE", (stream,)).fetchone()
            for event in events:
                row = self._db.execute(
                    'INSERT INTO tower_stream_events (stream, "offset", key, kind, body) '
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (stream, key) DO NOTHING "
                    'RETURNING "offset"',
                    (stream, last + 1, event.key or new_key(), event.kind,
                     json.dumps(event.data))).fetchone()
                last += 1 if row else 0
                offsets.append(last if row else 0)
            self._db.execute("UPDATE tower_stream_heads SET last = %s WHERE stream = %s",
                             (last, stream))
        return offsets

    def read(self, stream: str, after: int = 0, limit: int = READ_LIMIT) -> list[StreamEvent]:
        return self._events(
            'SELECT "offset", key, kind, body FROM tower_stream_events WHERE stream = %s '
            'AND "offset" > %s ORDER BY "offset" LIMIT %s', (stream, after, limit))

    def last(self, stream: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT last FROM tower_stream_heads WHERE stream = %s",
                                   (stream,)).fetchone()
        return int(row[0]) if row else 0

    def with_prefix(self, stream: str, prefix: str, kinds: Sequence[str]) -> list[StreamEvent]:
        return self._events(
            'SELECT "offset", key, kind, body FROM tower_stream_events WHERE stream = %s '
            'AND starts_with(key, %s) AND kind = ANY(%s) ORDER BY "offset"',
            (stream, prefix, list(kinds)))

    def _events(self, sql: str, args: tuple[Any, ...]) -> list[StreamEvent]:
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [StreamEvent(kind=kind, data=json.loads(body), key=key, offset=int(offset))
                for offset, key, kind, body in rows]

    def owners(self, prefix: str) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT stream FROM tower_stream_heads WHERE "
                                    "starts_with(stream, %s)", (prefix,)).fetchall()
        return [row[0] for row in rows]

    def forget(self, stream: str) -> None:
        with self._lock, self._db.transaction():
            self._db.execute("DELETE FROM tower_stream_events WHERE stream = %s", (stream,))
            self._db.execute("DELETE FROM tower_stream_heads WHERE stream = %s", (stream,))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
