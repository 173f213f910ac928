"""Who is signed in: built-in accounts (development: a JSON file, passwords as scrypt hashes,
``{"alice": {"password": "scrypt$<salt hex>$<hash hex>", "roles": ["manager"]}}``) or a
reverse proxy's user header, trusted on connections from the proxy's own addresses only,
with roles from a role map, never from the request. And what the inbox keeps on its own
side: sessions it can revoke, the decisions it restates, how many sign-ins failed lately.

Why (docs/inbox.md, "Sessions and forms"): a signed cookie alone cannot be taken back, so it
carries a random session id that counts only while the store (SQLite, or in memory) keeps
it, hashed: reading the store gives no cookie. Failed sign-ins slow down per (name,
address) only: a limit per name, or per address (an office's, a proxy's), is a lockout.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tower.activities.private_files import create_private, write_private
from tower.cli.errors import CliError

_N, _R, _P = 2**14, 8, 1  # scrypt cost: ~16 MiB, tens of milliseconds


@dataclass(frozen=True)
class Approver:
    name: str
    roles: tuple[str, ...]


@dataclass(frozen=True)
class Account:
    password: str  # scrypt$salt$hash
    roles: tuple[str, ...]


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P)
    return f"scrypt${salt.hex()}${digest.hex()}"


def password_ok(password: str, stored: str) -> bool:
    try:
        scheme, salt, _ = stored.split("$")
    except ValueError:
        return False
    return scheme == "scrypt" and hmac.compare_digest(
        hash_password(password, bytes.fromhex(salt)), stored)


@dataclass(frozen=True)
class Accounts:
    """Built-in accounts, by name."""

    accounts: Mapping[str, Account] = field(default_factory=dict)

    def sign_in(self, name: str, password: str) -> Approver | None:
        account = self.accounts.get(name)
        # Hash even for an unknown name: the answer's timing does not tell names apart.
        ok = password_ok(password, account.password if account else hash_password("x"))
        return Approver(name, account.roles) if account and ok else None

    @classmethod
    def load(cls, path: Path) -> Accounts:
        try:
            raw = json.loads(path.read_text())
            return cls({name: Account(str(a["password"]), tuple(a.get("roles", [])))
                        for name, a in raw.items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CliError(f"cannot read the inbox accounts file {path}: {exc}") from None


DEMO_APPROVERS = {"alice": ("manager",), "dave": ("dba",), "bob": ("manager",),
                  "carol": ("support",)}


def dev_accounts(path: Path) -> tuple[Accounts, dict[str, str]]:
    """The development accounts in ``path``, created with random passwords the first time.

    Returns the accounts and, when created now, the new passwords (to print once)."""
    if path.exists():
        return Accounts.load(path), {}
    passwords = {name: secrets.token_urlsafe(9) for name in DEMO_APPROVERS}
    # Both 0600 from the moment they exist (private_files); the plain passwords are kept
    # beside the hashes so `tower demo` can print the logins again. Passwords first: the
    # accounts file is what says the pair exists.
    write_private(path.with_suffix(".passwords.json"), json.dumps(passwords, indent=2))
    write_private(path, json.dumps({name: {"password": hash_password(passwords[name]),
                                           "roles": list(roles)}
                                    for name, roles in DEMO_APPROVERS.items()}, indent=2))
    return Accounts.load(path), passwords


@dataclass(frozen=True)
class ProxyAuth:
    """Trust ``header`` (e.g. X-Forwarded-User) from connections of ``proxies`` only."""

    header: str
    proxies: frozenset[str]
    roles: Mapping[str, tuple[str, ...]]

    def approver(self, peer: str | None, headers: Mapping[str, str]) -> Approver | None:
        if peer is None or peer not in self.proxies:
            return None
        name = headers.get(self.header.lower(), "").strip()
        if not name or name not in self.roles:
            return None
        return Approver(name, self.roles[name])

    @staticmethod
    def load_roles(path: Path) -> dict[str, tuple[str, ...]]:
        try:
            raw = json.loads(path.read_text())
            return {str(name): tuple(str(r) for r in roles) for name, roles in raw.items()}
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise CliError(f"cannot read the inbox role map {path}: {exc}") from None


RECEIPT_DAYS = 7
NAME_CHARS = 100  # a name longer than any account's counts as its first 100 characters

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


@dataclass
class _Count:
    failures: int
    last: float


@dataclass
class SignInLimits:
    """Failed sign-ins per (name, address). After ``free`` failures, each further one makes
    the next attempt wait ``first_delay`` seconds, doubling up to ``most_delay``. Attempts
    refused while waiting are not failures. A count is forgotten ``forget_after`` seconds
    after its last failure; a success clears it."""

    free: int = 5
    first_delay: float = 1.0
    most_delay: float = 30.0
    forget_after: float = 15 * 60
    clock: Callable[[], float] = time.monotonic
    most_keys: int = 10_000
    _counts: dict[tuple[str, str], _Count] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.first_delay <= self.most_delay < 60:
            raise ValueError("sign-in delays must be positive and under a minute: a longer "
                             "one locks users out")

    def wait(self, user: str, address: str) -> float:
        """Seconds before ``user`` may try again from ``address`` (0: now)."""
        now = self.clock()
        count = self._counts.get(self._key(user, address))
        if count is None or now - count.last > self.forget_after:
            return 0.0
        return max(0.0, count.last + self.delay(count.failures) - now)

    def failed(self, user: str, address: str) -> None:
        now, key = self.clock(), self._key(user, address)
        count = self._counts.get(key)
        if count is None or now - count.last > self.forget_after:
            count = self._counts[key] = _Count(0, now)
        count.failures, count.last = count.failures + 1, now
        if len(self._counts) > self.most_keys:
            self._forget(now)

    def succeeded(self, user: str, address: str) -> None:
        self._counts.pop(self._key(user, address), None)

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures of one name from one address."""
        if failures < self.free:
            return 0.0
        # Capped before it is raised to a power: a million failures is still most_delay.
        return min(self.most_delay, self.first_delay * 2.0 ** min(failures - self.free, 32))

    @staticmethod
    def _key(user: str, address: str) -> tuple[str, str]:
        return (user[:NAME_CHARS], address)

    def _forget(self, now: float) -> None:
        # Bounded memory under a spray of names: drop the stale, then the counts with the
        # fewest failures (oldest first), a tenth at a time. A spray of new names, one
        # failure each, cannot flush the count of a name guessed at many times.
        for key in [k for k, c in self._counts.items() if now - c.last > self.forget_after]:
            del self._counts[key]
        excess = len(self._counts) - self.most_keys
        if excess > 0:
            least = sorted(self._counts, key=lambda k: (self._counts[k].failures,
                                                        self._counts[k].last))
            for key in least[:excess + self.most_keys // 10]:
                del self._counts[key]
