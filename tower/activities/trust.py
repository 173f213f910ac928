"""The deployment's trust directory, and the ``load_trust`` activity that brings it into a run.

``TOWER_TRUST_DIR`` (default ``.tower/trust``) holds ``<tenant>/roster.json`` (approvers'
PUBLIC keys) and ``<tenant>/policy.json``. A run gets them only through this activity
(recorded: replay sees the same snapshot); nothing a requester sends changes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity

from tower.contract.failures import Code, TowerError, failure
from tower.contract.trust import Policy, Roster, TrustRequest, TrustSnapshot

DEFAULT_TRUST_DIR = Path(".tower") / "trust"
M = TypeVar("M", bound=BaseModel)
TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class TrustError(TowerError, ValueError):
    """The trust directory is missing or holds something invalid (a ValueError too)."""

    CODE = Code.TRUST_MISSING


def trust_dir(path: str | Path | None = None) -> Path:
    return Path(path or os.environ.get("TOWER_TRUST_DIR") or DEFAULT_TRUST_DIR)


def tenant_dir(root: Path, tenant: str) -> Path:
    """``root/<tenant>``; a tenant name that is not a plain name is refused (no ``..``)."""
    if not TENANT.match(tenant) or tenant in (".", ".."):
        raise TrustError(f"invalid tenant name {tenant!r}")
    return root / tenant


def read_trust(root: Path, tenant: str) -> TrustSnapshot:
    folder = tenant_dir(root, tenant)
    roster = _read(folder / "roster.json", Roster, tenant)
    policy = _read(folder / "policy.json", Policy, tenant)
    raw = json.dumps([roster.model_dump(mode="json"), policy.model_dump(mode="json")],
                     sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(raw.encode()).hexdigest()[:16]
    return TrustSnapshot(roster=roster, policy=policy, digest=digest)


def _read(path: Path, model: type[M], tenant: str) -> M:
    if not path.is_file():
        raise TrustError(f"no {path.name} for tenant {tenant!r}: expected {path} (the "
                         f"deployment's trust directory, TOWER_TRUST_DIR; see docs/approvals.md)")
    try:
        value = model.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise TrustError(f"{path} is invalid: {problems}") from None
    named = getattr(value, "tenant", tenant)
    if named != tenant:
        raise TrustError(f"{path} is for tenant {named!r}, not {tenant!r}")
    return value


class TrustLoader:
    """Hosts ``load_trust`` on one trust directory."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = trust_dir(root)

    @activity.defn
    def load_trust(self, request: TrustRequest) -> TrustSnapshot:
        try:
            return read_trust(self.root, request.tenant)
        except TrustError as exc:
            # Retrying cannot make a missing policy appear: the run fails with the reason.
            raise failure(exc) from None
