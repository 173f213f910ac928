"""Who is signed in: built-in accounts (development) or a trusted reverse proxy's header.

Built-in accounts live in a JSON file, passwords as scrypt hashes:
``{"alice": {"password": "scrypt$<salt hex>$<hash hex>", "roles": ["manager"]}}``.

Behind a reverse proxy that authenticates users (oauth2-proxy in front of an OIDC
provider, an SSO gateway), the inbox trusts the proxy's user header, but only on
connections from the proxy's own addresses; roles then come from the role map
(``{"alice": ["manager"]}``), never from the request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tower.activities.private_files import write_private
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
    if scheme != "scrypt":
        return False
    return hmac.compare_digest(hash_password(password, bytes.fromhex(salt)), stored)


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
