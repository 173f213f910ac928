"""What the inbox keeps on its own side: sessions it can revoke and the decisions it
restates (how many sign-ins failed lately: limits.py).

A session cookie is signed, but a signed cookie alone cannot be taken back: copied before
sign-out, it would work until it expires. So the cookie carries a random session id, and a
session counts only while that id is in the store (SQLite, beside the inbox's data, or in
memory); sign-out deletes it. The store keeps ids hashed: reading it gives no cookie.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

from tower.activities.private_files import create_private

RECEIPT_DAYS = 7

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,
  user TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS receipts (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,
  user TEXT NOT NULL, created REAL NOT NULL, body TEXT NOT NULL);
"""


def _hashed(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class InboxStore:
    """Sessions and receipts of the inboxes sharing one file (each row names its tenant)."""

    def __init__(self, path: Path | None = None) -> None:
        if path is not None:
            create_private(path)  # 0600 before SQLite writes a byte (its journals follow it)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False,
                                   isolation_level=None)
        self._db.executescript(SCHEMA)

    def open_session(self, tenant: str, user: str, seconds: float) -> str:
        sid = secrets.token_urlsafe(32)
        now = time.time()
        self._db.execute("DELETE FROM sessions WHERE expires < ?", (now,))
        self._db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)",
                         (_hashed(sid), tenant, user, now + seconds))
        return sid

    def session_user(self, tenant: str, sid: object) -> str | None:
        """The user of a live session ``sid`` of ``tenant``, else None."""
        if not isinstance(sid, str) or not sid:
            return None
        row = self._db.execute("SELECT user FROM sessions WHERE id = ? AND tenant = ? AND "
                               "expires >= ?", (_hashed(sid), tenant, time.time())).fetchone()
        return str(row[0]) if row else None

    def close_session(self, sid: object) -> None:
        if isinstance(sid, str) and sid:
            self._db.execute("DELETE FROM sessions WHERE id = ?", (_hashed(sid),))

    def keep_receipt(self, tenant: str, user: str, body: dict[str, Any]) -> str:
        rid = secrets.token_urlsafe(16)
        now = time.time()
        self._db.execute("DELETE FROM receipts WHERE created < ?", (now - RECEIPT_DAYS * 86400,))
        self._db.execute("INSERT INTO receipts VALUES (?, ?, ?, ?, ?)",
                         (rid, tenant, user, now, json.dumps(body)))
        return rid

    def receipt(self, tenant: str, user: str, rid: str) -> dict[str, Any] | None:
        """A receipt, only for the approver who decided (anyone else: None)."""
        row = self._db.execute("SELECT body FROM receipts WHERE id = ? AND tenant = ? AND "
                               "user = ?", (rid, tenant, user)).fetchone()
        return dict(json.loads(row[0])) if row else None
