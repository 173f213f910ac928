"""Approval secrets and signed decisions, on the client side (the CLI, the demo, tests).

The tenant's secret never enters a workflow: a run gets ``run_key(secret, tenant, run)``
in its input, and a decision is signed with that same per-run key. Where the secret
comes from, first match wins:

1. ``TOWER_APPROVAL_SECRET_<TENANT>`` (tenant upper-cased, other characters as ``_``);
2. ``TOWER_APPROVAL_SECRET``;
3. the file named by ``TOWER_APPROVAL_SECRET_FILE``, else ``.tower/approval-secret``.

Unsigned decisions are possible only when ``TOWER_ALLOW_UNSIGNED=1`` is set both when
the run starts (the run records it) and when the decision is sent.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import uuid
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from starter.common import CliError
from tower.contract.decisions import Decision, Verdict
from tower.core.approval import ApprovalSettings, run_key, sign

DEFAULT_SECRET_FILE = Path(".tower") / "approval-secret"


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def secret_for(tenant: str, env: Mapping[str, str] | None = None) -> tuple[bytes, str] | None:
    """The tenant's secret and where it came from, or None."""
    env = _env(env)
    per_tenant = "TOWER_APPROVAL_SECRET_" + re.sub(r"[^A-Z0-9]", "_", tenant.upper())
    for name in (per_tenant, "TOWER_APPROVAL_SECRET"):
        if env.get(name):
            return env[name].encode(), name
    path = Path(env.get("TOWER_APPROVAL_SECRET_FILE") or DEFAULT_SECRET_FILE)
    if path.is_file():
        text = path.read_text().strip()
        if not text:
            raise CliError(f"the approval secret file {path} is empty")
        return text.encode(), str(path)
    return None


def unsigned_allowed(env: Mapping[str, str] | None = None) -> bool:
    return _env(env).get("TOWER_ALLOW_UNSIGNED", "").lower() in ("1", "true", "yes")


def ensure_dev_secret(path: Path = DEFAULT_SECRET_FILE) -> bool:
    """Create a random development secret file if none exists; True if created."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return True


def settings_for_run(
    tenant: str, run: str, env: Mapping[str, str] | None = None
) -> ApprovalSettings:
    """What a gated run needs in its input to verify decisions."""
    found = secret_for(tenant, env)
    allow = unsigned_allowed(env)
    if found is None and not allow:
        raise CliError(
            f"no approval secret for tenant {tenant!r}: set TOWER_APPROVAL_SECRET (or "
            f"TOWER_APPROVAL_SECRET_<TENANT>, or a file in TOWER_APPROVAL_SECRET_FILE), or "
            "allow unsigned decisions on a development deployment with TOWER_ALLOW_UNSIGNED=1")
    key = run_key(found[0], tenant, run) if found else None
    return ApprovalSettings(key=key, tenant=tenant, allow_unsigned=allow)


def with_approvals(request: BaseModel, tenant: str, run: str,
                   env: Mapping[str, str] | None = None) -> BaseModel:
    """Fill a gated agent's ``approvals`` input field; other inputs pass unchanged."""
    if "approvals" not in type(request).model_fields:
        return request
    return request.model_copy(update={"approvals": settings_for_run(tenant, run, env)})


def parse_edits(pairs: list[str] | None) -> dict[str, Any]:
    """``--set field=value``: the value is JSON when it parses (numbers, true), else text."""
    edits: dict[str, Any] = {}
    for pair in pairs or []:
        field, sep, raw = pair.partition("=")
        if not sep or not field.strip():
            raise CliError(f"--set expects field=value, got {pair!r}")
        try:
            edits[field.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            edits[field.strip()] = raw
    return edits


def make_decision(
    *, tenant: str, run: str, gate: str, verdict: Verdict, approver: str, role: str,
    expires_at: datetime, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, env: Mapping[str, str] | None = None,
) -> tuple[Decision, str]:
    """A decision signed with the tenant's secret; returns it and a line saying how."""
    decision = Decision(
        decision_id=decision_id or f"d-{uuid.uuid4().hex[:12]}", tenant=tenant, run=run,
        gate=gate, decision=verdict, approver=approver, role=role, expires_at=expires_at,
        note=note, edits=edits or {})
    found = secret_for(tenant, env)
    if found is not None:
        return sign(run_key(found[0], tenant, run), decision), f"signed with {found[1]}"
    if unsigned_allowed(env):
        return decision, "UNSIGNED (TOWER_ALLOW_UNSIGNED=1: a development deployment)"
    raise CliError(f"no approval secret for tenant {tenant!r} to sign with: set "
                   "TOWER_APPROVAL_SECRET (or TOWER_APPROVAL_SECRET_FILE)")
