"""An approver's own signing keys, in their config dir, never in a run or the deployment:
``<config>/keys/<NAME>.jwk`` (mode 0600); ``config`` is ``TOWER_CONFIG_DIR``, else
``$XDG_CONFIG_HOME/tower``, else ``~/.config/tower``. The public half goes in the roster.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import uuid
from pathlib import Path
from typing import Any

from joserfc.jwk import OKPKey

from tower.activities.private_files import write_private
from tower.client.errors import ClientError
from tower.contract import trust
from tower.contract.trust import Claims, Member, PublicKey, Roster
from tower.core.signing import decision_claims, public_of, sign

NAME = re.compile(trust.NAME)  # a roster member's name


def config_dir() -> Path:
    if os.environ.get("TOWER_CONFIG_DIR"):
        return Path(os.environ["TOWER_CONFIG_DIR"])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "tower"


def check_name(name: str) -> str:
    """``name`` if it may name an approver and their key file; else a ClientError (``../x``
    is refused)."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ClientError(f"invalid name {str(name)[:100]!r}: 1 to 100 letters, digits, "
                          ". _ @ -, starting with a letter or digit")
    return name


def key_path(name: str, config: Path | None = None) -> Path:
    return (config or config_dir()) / "keys" / f"{check_name(name)}.jwk"


def new_key(kid: str | None = None) -> dict[str, Any]:
    """A fresh Ed25519 private JWK carrying its key id."""
    private = dict(OKPKey.generate_key("Ed25519").as_dict(private=True))
    private["kid"] = kid or f"k-{uuid.uuid4().hex[:12]}"
    return private


def create_key(name: str, config: Path | None = None, *, kid: str | None = None) -> PublicKey:
    """Write a new private key for ``name`` (refusing to overwrite one); its public JWK."""
    path = key_path(name, config)
    if path.exists():
        raise ClientError(f"{path} exists: a key is never overwritten (rotate with a new NAME "
                       "or remove the old file yourself)")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)  # one made before, looser
    private = new_key(kid or f"{name}-{time.strftime('%Y%m%d')}-{uuid.uuid4().hex[:6]}")
    # Created with 0600 from the start: no moment where another user could read it.
    write_private(path, json.dumps(private), exclusive=True)
    return public_of(private)


def load_key(name: str, config: Path | None = None) -> dict[str, Any]:
    path = key_path(name, config)
    if not path.is_file():
        raise ClientError(f"no signing key for {name!r} at {path}: make one with "
                       f"`tower keys new {name}` and have its public key added to the roster")
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise ClientError(f"{path} is readable by others (mode "
                       f"{stat.S_IMODE(path.stat().st_mode):o}): chmod 600 it")
    key: dict[str, Any] = json.loads(path.read_text())
    if "d" not in key or "kid" not in key:
        raise ClientError(f"{path} is not a private Ed25519 JWK with a kid")
    return key


def sign_decision(name: str, *, config: Path | None = None, key: dict[str, Any] | None = None,
                  **claims: Any) -> tuple[str, Claims]:
    """A decision signed with ``name``'s own key (``key``, else the one in ``config``;
    ``claims``: see ``decision_claims``)."""
    made = decision_claims(sub=name, now=time.time(),
                           jti=claims.pop("jti", None) or f"d-{uuid.uuid4().hex[:12]}",
                           **claims)
    return sign(made, key or load_key(name, config)), made


def with_member(roster: Roster, new: Member) -> Roster:
    """``roster`` with ``new`` added; a member of that name gets the new key added (a
    rotation: both work until the old one is removed)."""
    members = list(roster.members)
    for i, m in enumerate(members):
        if m.name == new.name:
            members[i] = m.model_copy(update={"keys": [*m.keys, *new.keys]})
            break
    else:
        members.append(new)
    return roster.model_copy(update={"members": members})
