"""SQLite's write-ahead log for a file several processes open (workers starting together)."""

from __future__ import annotations

import sqlite3
import time


def wal(db: sqlite3.Connection, tries: int = 200) -> None:
    """Put the file in WAL mode (readers never block the writer). The switch needs the file
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
