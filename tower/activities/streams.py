"""Where runs' live streams are kept: a side channel beside the history (docs/streaming.md).

A SQLite file in ``.tower/`` by default (WAL: a worker writes, any client process on the
host reads); PostgreSQL for workers and clients on different hosts. ``open_streams`` picks
one from ``TOWER_STREAMS`` (a path or a ``postgresql://`` URL).

Per stream, events with offsets 1, 2, 3, ... and a unique key each: appending an event
whose key is already there does nothing, so a retried task cannot publish twice. An append
locks its stream's row of heads (its last offset), so offsets are dense and in commit
order, and a reader that polls ``offset > last seen`` never skips one committed late.
Readers poll (every 20–50 ms): no connection is held open per subscriber, which is what
PostgreSQL's LISTEN/NOTIFY would need.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tower.activities.stores import Sql, StoreSettings, is_url, redact, why_unreachable
from tower.contract.stream import StreamEvent

log = logging.getLogger("tower.streams")
READ_LIMIT = 1000
RETRY_SECONDS = 2.0  # between tries to publish to a stream store that stopped answering
SCHEMA = """
CREATE TABLE IF NOT EXISTS {heads} (stream TEXT PRIMARY KEY, last BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS {events} (
    stream TEXT NOT NULL, "offset" BIGINT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL,
    body TEXT NOT NULL, PRIMARY KEY (stream, "offset"), UNIQUE (stream, key));
"""


def open_streams(spec: str | os.PathLike[str] | None = None, *, create: bool = True
                 ) -> StreamStore:
    """The store ``spec`` names, else the settings' (``StoreSettings.from_env``), so a
    worker and a CLI run in the same project agree."""
    return StreamStore(os.fspath(spec or StoreSettings.from_env().streams), create=create)


def new_key() -> str:
    return uuid.uuid4().hex


class StreamStore:
    """The stream store at ``spec``; ``create=False`` (a client) reads a missing local
    file as an empty store, never leaving a database behind where a command ran."""

    def __init__(self, spec: str | os.PathLike[str], *, create: bool = True) -> None:
        spec = os.fspath(spec)
        # PostgreSQL shares a database with the other stores: prefixed names.
        prefix = "tower_" if is_url(spec) else ""
        self.heads, self.events = f"{prefix}stream_heads", f"{prefix}stream_events"
        self.db = Sql(spec, SCHEMA.format(heads=self.heads, events=self.events),
                      lock_id=7246130, create=create, durable=False)
        self.outage = Outage(self)  # shared by every publisher to this store

    def __str__(self) -> str:
        return str(self.db)

    def append(self, stream: str, events: Sequence[StreamEvent]) -> list[int]:
        """Store ``events`` in order; their offsets (0 for one whose key was there)."""
        offsets = []
        with self.db.transaction() as execute:
            # A stream's head starts at its last event (a file from before heads).
            execute(f'INSERT INTO {self.heads} SELECT ?, coalesce(max("offset"), 0) FROM '
                    f"{self.events} WHERE stream = ? ON CONFLICT (stream) DO NOTHING",
                    (stream, stream))
            lock = " FOR UPDATE" if self.db.pg else ""  # SQLite: the write lock is held
            (last,) = execute(f"SELECT last FROM {self.heads} WHERE stream = ?{lock}",
                              (stream,)).fetchone()
            for event in events:
                added = execute(
                    f'INSERT INTO {self.events} (stream, "offset", key, kind, body) VALUES '
                    "(?, ?, ?, ?, ?) ON CONFLICT (stream, key) DO NOTHING",
                    (stream, last + 1, event.key or new_key(), event.kind,
                     json.dumps(event.data))).rowcount
                last += added
                offsets.append(last if added else 0)
            execute(f"UPDATE {self.heads} SET last = ? WHERE stream = ?", (last, stream))
        return offsets

    def read(self, stream: str, after: int = 0, limit: int = READ_LIMIT) -> list[StreamEvent]:
        """Events with an offset above ``after``, in order."""
        return self._events('"offset" > ? ORDER BY "offset" LIMIT ?', stream, after, limit)

    def last(self, stream: str) -> int:
        """The stream's last offset (0: nothing yet): where a reader of what comes next
        starts."""
        rows = self.db.rows(f'SELECT max("offset") FROM {self.events} WHERE stream = ?',
                            (stream,))
        return int(rows[0][0] or 0) if rows else 0

    def with_prefix(self, stream: str, prefix: str, kinds: Sequence[str]) -> list[StreamEvent]:
        """Events of ``kinds`` whose key starts with ``prefix`` (a model call's attempts)."""
        return self._events(f"substr(key, 1, length(?)) = ? AND kind IN "
                            f'({", ".join("?" * len(kinds))}) ORDER BY "offset"',
                            stream, prefix, prefix, *kinds)

    def _events(self, where: str, stream: str, *args: object) -> list[StreamEvent]:
        return [StreamEvent(kind=kind, data=json.loads(body), key=key, offset=int(offset))
                for offset, key, kind, body in self.db.rows(
                    f'SELECT "offset", key, kind, body FROM {self.events} WHERE stream = ? '
                    f"AND {where}", (stream, *args))]

    def owners(self, prefix: str) -> list[str]:
        """The streams (``namespace/workflow id``) under ``prefix``."""
        return [str(row[0]) for row in self.db.rows(
            f"SELECT stream FROM {self.heads} WHERE substr(stream, 1, length(?)) = ?",
            (prefix, prefix))]

    def forget(self, stream: str) -> None:
        """Remove a stream's events (retention: tower/activities/cleanup.py)."""
        with self.db.transaction() as execute:
            execute(f"DELETE FROM {self.events} WHERE stream = ?", (stream,))
            execute(f"DELETE FROM {self.heads} WHERE stream = ?", (stream,))

    def close(self) -> None:
        self.db.close()


class Outage:
    """The state of publishing to one stream store (``StreamStore.outage``).
    A store that stops answering costs its watchers events, never the run: one warning when
    publishing fails, one line when it works again, and meanwhile at most one try every
    ``RETRY_SECONDS`` (a reply is not held up by connection attempts)."""

    def __init__(self, store: Any) -> None:
        self.name = redact(str(getattr(store, "url", store)))  # a password hidden
        self._lock = threading.Lock()
        self._since: float | None = None  # when publishing started to fail
        self._tried = 0.0
        self.dropped = 0

    def publish(self, work: Callable[[], object], events: int = 1) -> None:
        """Run ``work`` (an append of ``events`` events) unless the store is down and was tried
        less than RETRY_SECONDS ago; never raises."""
        now = time.monotonic()
        with self._lock:
            if self._since is not None and now - self._tried < RETRY_SECONDS:
                self.dropped += events
                return
            self._tried = now
        try:
            work()
        except Exception as exc:  # noqa: BLE001  (watchers lose events; the run does not)
            with self._lock:
                self.dropped += events
                first, self._since = self._since is None, self._since or now
            if first:
                log.warning("stream store %s: not published: %s; its events are dropped "
                            "until it answers (watchers miss them, runs go on)",
                            self.name, why_unreachable(exc))
            return
        with self._lock:
            since, dropped, self._since, self.dropped = self._since, self.dropped, None, 0
        if since is not None:
            log.warning("stream store %s answers again after %.0f s; %d events were not "
                        "published", self.name, now - since, dropped)

