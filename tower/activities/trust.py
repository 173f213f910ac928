"""The deployment's trust directory, and the activities of Tower's that read it.

``TOWER_TRUST_DIR`` (default ``.tower/trust``) holds, per tenant, ``roster.json``
(approvers' PUBLIC keys) and ``policy.json``, which a run gets only through ``load_trust``
(recorded: replay sees the same snapshot; nothing a requester sends changes them);
``worker.jwk``, the deployment's key ``tower_attest`` signs with (or ``TOWER_WORKER_KEY``);
``notify.json``, the webhook ``notify_gate`` posts to, read at send time: a webhook URL is
often a secret, so it never enters a run (the policy does).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity

from tower.activities.notify import message
from tower.contract.failures import Code, TowerError, brief, failure
from tower.contract.notify import GateNotice, NotifyPolicy
from tower.contract.trust import (
    AttestClaims,
    AttestRequest,
    Policy,
    Roster,
    TrustRequest,
    TrustSnapshot,
)
from tower.core.signing import ATTEST_TYPE, sign

DEFAULT_TRUST_DIR = Path(".tower") / "trust"
M = TypeVar("M", bound=BaseModel)
TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
WORKER_KEY_FILE = "worker.jwk"
NOTIFY_FILE = "notify.json"
TIMEOUT_SECONDS = 10.0  # a webhook's
log = logging.getLogger(__name__)


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
        raise TrustError(f"{path} is invalid: {brief(exc)}") from None
    named = getattr(value, "tenant", tenant)
    if named != tenant:
        raise TrustError(f"{path} is for tenant {named!r}, not {tenant!r}")
    return value


class Trust:
    """Hosts ``load_trust``, ``tower_attest`` and ``notify_gate`` on one trust directory
    (and the worker key ``key``, else ``TOWER_WORKER_KEY``, else each tenant's file)."""

    def __init__(self, root: str | Path | None = None, key: str | Path | None = None) -> None:
        self.root = trust_dir(root)
        self.key = key or os.environ.get("TOWER_WORKER_KEY") or None

    @activity.defn
    def load_trust(self, request: TrustRequest) -> TrustSnapshot:
        try:
            return read_trust(self.root, request.tenant)
        except TrustError as exc:
            # Retrying cannot make a missing policy appear: the run fails with the reason.
            raise failure(exc) from None

    def key_for(self, tenant: str) -> dict[str, Any] | None:
        path = Path(self.key) if self.key else tenant_dir(self.root, tenant) / WORKER_KEY_FILE
        return dict(json.loads(path.read_text())) if path.is_file() else None

    @activity.defn  # named by the function: ATTEST_ACTIVITY
    def tower_attest(self, request: AttestRequest) -> str:
        """The deployment's worker vouches for the calling run's pending request, signing with
        the key whose public half the roster names ``attests: true``; "" without a key (its
        requests are then not listed, only decidable by id). The workflow id, run id, type and
        task queue come from the activity's own info, never from the request: a foreign
        workflow scheduling this activity on our queue gets our queue named, and a listing
        comparing it with the run's own queue refuses it (docs/approvals.md)."""
        info = activity.info()
        try:
            key = self.key_for(request.tenant)
        except (OSError, ValueError) as exc:  # a TrustError too
            log.warning("cannot read the worker key for tenant %r: %s", request.tenant, exc)
            return ""
        if key is None:
            log.warning("no worker key for tenant %r (TOWER_WORKER_KEY or %s): its pending "
                        "requests are not listed", request.tenant, WORKER_KEY_FILE)
            return ""
        claims = AttestClaims(
            tenant=request.tenant, run=info.workflow_id or "?", run_id=request.run_id,
            gate=request.gate, step=request.step, agent=info.workflow_type or "?",
            task_queue=info.task_queue, proposal=request.proposal,
            execution=info.workflow_run_id or "",
            jti=uuid.uuid4().hex, iat=int(time.time()), exp=request.expires_at)
        return sign(claims, key, typ=ATTEST_TYPE)

    @activity.defn
    def notify_gate(self, notice: GateNotice) -> str:
        """Tell approvers that a run waits for them (tower/activities/notify.py's message).
        A 5xx, 429 or timeout is retried; other 4xx answers are final."""
        try:
            path = tenant_dir(self.root, notice.tenant) / NOTIFY_FILE
        except TrustError as exc:
            raise failure(TowerError(str(exc), code=Code.BAD_NOTIFY_SETTINGS)) from None
        if not path.is_file():
            return f"no {NOTIFY_FILE} for tenant {notice.tenant}: nobody notified"
        try:
            policy = NotifyPolicy.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            raise failure(TowerError(f"{path} is invalid: {brief(exc)}",
                                     code=Code.BAD_NOTIFY_SETTINGS)) from None
        import httpx  # here: a worker that never notifies is spared its start-up (and rich's)

        try:
            reply = httpx.post(policy.url, json=message(policy, notice), timeout=TIMEOUT_SECONDS)
        except httpx.HTTPError as exc:
            raise failure(TowerError(f"webhook unreachable: {type(exc).__name__}",
                                     code=Code.WEBHOOK_UNREACHABLE)) from None
        if reply.status_code == 429 or reply.status_code >= 500:
            raise failure(TowerError(f"webhook answered {reply.status_code}; retrying",
                                     code=Code.WEBHOOK_UNREACHABLE))
        if reply.status_code >= 400:
            raise failure(TowerError(f"webhook refused the notice: {reply.status_code}",
                                     code=Code.WEBHOOK_REFUSED))
        return f"notified {policy.format} webhook ({reply.status_code})"
