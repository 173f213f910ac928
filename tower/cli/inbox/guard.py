"""What the inbox keeps on its own side: sessions it can revoke, the decisions it
restates, and how many sign-ins failed lately.

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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", check_same_thread=False,
                                   isolation_level=None)
        self._db.executescript(SCHEMA)
        if path is not None:
            path.chmod(0o600)

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


@dataclass
class SignInLimits:
    """At most ``per_user`` failed sign-ins per name and ``per_address`` per client
    address within ``window`` seconds; past either, every sign-in there is refused (even
    with the right password) until the oldest failure leaves the window.

    A success clears its name's failures, not its address's: an attacker who knows one
    password cannot sign in to it between guesses at another account to reset the count.
    The address limit is higher: colleagues share an office's address."""

    per_user: int = 5
    per_address: int = 20
    window: float = 15 * 60
    clock: Callable[[], float] = time.monotonic
    most_keys: int = 10_000
    _failures: dict[tuple[str, str], deque[float]] = field(default_factory=dict)

    def wait(self, user: str, address: str) -> float:
        """Seconds before ``user`` may try again from ``address`` (0: now)."""
        now = self.clock()
        waits = [self._wait(("user", user[:100]), self.per_user, now),
                 self._wait(("address", address), self.per_address, now)]
        return max(waits)

    def failed(self, user: str, address: str) -> None:
        now = self.clock()
        for key in (("user", user[:100]), ("address", address)):
            self._failures.setdefault(key, deque()).append(now)
        if len(self._failures) > self.most_keys:
            self._forget(now)

    def succeeded(self, user: str) -> None:
        self._failures.pop(("user", user[:100]), None)

    def _wait(self, key: tuple[str, str], limit: int, now: float) -> float:
        times = self._failures.get(key)
        if not times:
            return 0.0
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) < limit:
            return 0.0
        return times[-limit] + self.window - now

    def _forget(self, now: float) -> None:
        # Bounded memory under a spray of names: drop the stale, then the oldest.
        for key in [k for k, t in self._failures.items() if not t or t[-1] <= now - self.window]:
            del self._failures[key]
        while len(self._failures) > self.most_keys:
            del self._failures[next(iter(self._failures))]
