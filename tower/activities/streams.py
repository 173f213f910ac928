"""Where runs' live streams are kept: a side channel beside the history (docs/streaming.md).

``SqliteStreams`` is the embedded default (a file in ``.tower/``, WAL: a worker writes, any
client process on the host reads); ``tower.activities.streams_pg.PostgresStreams`` is the
production store, for workers and clients on different hosts. ``open_streams`` picks one
from ``TOWER_STREAMS`` (a path or a ``postgresql://`` URL).

Both keep, per stream, events with offsets 1, 2, 3, ... and a unique key each: appending
an event whose key is already there does nothing, so a retried task cannot publish twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from tower.activities.wal import wal
from tower.contract.stream import StreamEvent

READ_LIMIT = 1000


class StreamStore(Protocol):
    def append(self, stream: str, events: Sequence[StreamEvent]) -> list[int]:
        """Store ``events`` in order; their offsets (0 for one whose key was there)."""

    def read(self, stream: str, after: int = 0, limit: int = READ_LIMIT) -> list[StreamEvent]:
        """Events with an offset above ``after``, in order."""

    def last(self, stream: str) -> int:
        """The stream's last offset (0: nothing yet): where a reader of what comes next
        starts."""

    def with_prefix(self, stream: str, prefix: str, kinds: Sequence[str]) -> list[StreamEvent]:
        """Events of ``kinds`` whose key starts with ``prefix`` (a model call's attempts)."""

    def owners(self, prefix: str) -> list[str]:
        """The streams (``namespace/workflow id``) under ``prefix``."""

    def forget(self, stream: str) -> None:
        """Remove a stream's events (retention: tower/activities/cleanup.py)."""

    def close(self) -> None: ...


def open_streams(spec: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None, *, create: bool = True) -> StreamStore:
    """The store ``spec`` names, else the settings' (``StoreSettings.from_env``:
    TOWER_STREAMS, else TOWER_STORE_URL, else ``streams.sqlite`` beside the tools' database
    TOWER_DB, by default in ``.tower/``): a worker and a CLI run in the same project agree."""
    from tower.activities.stores import StoreSettings

    text = os.fspath(spec or StoreSettings.from_env(env).streams)
    if text.startswith(("postgresql://", "postgres://")):
        from tower.activities.streams_pg import PostgresStreams

        return PostgresStreams(text)
    return SqliteStreams(text, create=create)


def new_key() -> str:
    return uuid.uuid4().hex


_SCHEMA = """
CREATE TABLE IF NOT EXISTS stream_events (
    stream TEXT NOT NULL, "offset" INTEGER NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (stream, "offset"), UNIQUE (stream, key))
"""


class SqliteStreams:
    """One SQLite file; callers in this process share a connection under a lock. With
    ``create=False`` (a client) a missing file is an empty store until a worker makes it:
    reading never leaves a database behind in the directory a command ran in."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True) -> None:
        self.path, self.create = Path(path), create
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if create:
            self._open()

    def _open(self) -> sqlite3.Connection | None:
        if self._db is None and (self.create or self.path.exists()):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA busy_timeout=30000")
            wal(db)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints
            db.execute(_SCHEMA)
            self._db = db
        return self._db

    def append(self, stream: str, events: Sequence[StreamEvent]) -> list[int]:
        offsets = []
        with self._lock:
            db = self._open()
            assert db is not None, "a store opened with create=False only reads"
            db.execute("BEGIN IMMEDIATE")  # the offset is read and taken in one go
            try:
                (last,) = db.execute(
                    'SELECT coalesce(max("offset"), 0) FROM stream_events WHERE stream = ?',
                    (stream,)).fetchone()
                for event in events:
                    cursor = db.execute(
                        'INSERT OR IGNORE INTO stream_events (stream, "offset", key, kind, body)'
                        " VALUES (?, ?, ?, ?, ?)",
                        (stream, last + 1, event.key or new_key(), event.kind,
                         json.dumps(event.data)))
                    last += cursor.rowcount
                    offsets.append(last if cursor.rowcount else 0)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return offsets

    def _rows(self, sql: str, args: Sequence[object]) -> list[tuple[int, str, str, str]]:
        with self._lock:
            db = self._open()
            return [] if db is None else db.execute(sql, args).fetchall()

    def read(self, stream: str, after: int = 0, limit: int = READ_LIMIT) -> list[StreamEvent]:
        return [_event(*row) for row in self._rows(
            'SELECT "offset", key, kind, body FROM stream_events WHERE stream = ? AND '
            '"offset" > ? ORDER BY "offset" LIMIT ?', (stream, after, limit))]

    def last(self, stream: str) -> int:
        with self._lock:
            db = self._open()
            if db is None:
                return 0
            (last,) = db.execute('SELECT coalesce(max("offset"), 0) FROM stream_events '
                                 "WHERE stream = ?", (stream,)).fetchone()
            return int(last)

    def with_prefix(self, stream: str, prefix: str, kinds: Sequence[str]) -> list[StreamEvent]:
        marks = ", ".join("?" * len(kinds))
        return [_event(*row) for row in self._rows(
            f'SELECT "offset", key, kind, body FROM stream_events WHERE stream = ? AND '
            f'key >= ? AND key < ? AND kind IN ({marks}) ORDER BY "offset"',
            (stream, prefix, prefix + "\U0010ffff", *kinds))]

    def owners(self, prefix: str) -> list[str]:
        return [str(row[0]) for row in self._rows(
            "SELECT DISTINCT stream FROM stream_events WHERE stream >= ? AND stream < ?",
            (prefix, prefix + "\U0010ffff"))]

    def forget(self, stream: str) -> None:
        with self._lock:
            db = self._open()
            if db is not None:
                db.execute("DELETE FROM stream_events WHERE stream = ?", (stream,))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None


def _event(offset: int, key: str, kind: str, body: str) -> StreamEvent:
    return StreamEvent(kind=kind, data=json.loads(body), key=key, offset=offset)
