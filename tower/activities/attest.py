"""The ``tower_attest`` activity: the deployment's worker vouches for a pending request.

The worker signs with the deployment's key (``TOWER_WORKER_KEY``, else
``<trust dir>/<tenant>/worker.jwk``), whose public half the roster names ``attests: true``.
The workflow id, run id, type and task queue come from the activity's own info, never from
the request: a foreign workflow scheduling this activity on our queue gets our queue named,
and a listing comparing it with the run's own queue refuses it (docs/approvals.md).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio import activity

from tower.activities.trust import TrustError, tenant_dir, trust_dir
from tower.contract.trust import AttestClaims, AttestRequest
from tower.core.signing import ATTEST_TYPE, sign

WORKER_KEY_FILE = "worker.jwk"
log = logging.getLogger(__name__)


class Attester:
    """Hosts ``tower_attest`` on one trust directory (or ``TOWER_WORKER_KEY``)."""

    def __init__(self, root: str | Path | None = None, key: str | Path | None = None) -> None:
        self.root = trust_dir(root)
        self.key = key or os.environ.get("TOWER_WORKER_KEY") or None

    def key_for(self, tenant: str) -> dict[str, Any] | None:
        path = Path(self.key) if self.key else tenant_dir(self.root, tenant) / WORKER_KEY_FILE
        if not path.is_file():
            return None
        return dict(json.loads(path.read_text()))

    @activity.defn  # named by the function: ATTEST_ACTIVITY
    def tower_attest(self, request: AttestRequest) -> str:
        """The attestation of the calling run's pending request; "" without a key (its
        requests are then not listed, only decidable by id)."""
        info = activity.info()
        try:
            key = self.key_for(request.tenant)
        except (TrustError, OSError, ValueError) as exc:
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
