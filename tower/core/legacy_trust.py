"""The HMAC decisions of runs started before signed decisions (kept so they replay).

Runs started before the ``tower-trust-v2`` patch carried a per-run HMAC key in their
input and accept decisions signed with it. Their histories replay through this module,
and a run still in flight keeps this (weaker: the key is readable in its history) model
until it ends; docs/approvals.md says how to drain them. New runs never take this path:
``workflow.patched`` is recorded in their history, so no input can select it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from tower.contract.decisions import Decision

SIGNATURE_VERSION = "tower-decision-v1"
RUN_KEY_VERSION = "tower-run-key-v1"


class ApprovalSettings(BaseModel):
    """The old runs' ``approvals`` input field. New runs refuse it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    tenant: str | None = Field(default=None, min_length=1, max_length=200)
    allow_unsigned: bool = False


def canonical_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_key(secret: bytes, tenant: str, run: str) -> str:
    """The per-run key an old run was started with (derived from a tenant secret)."""
    if not secret:
        raise ValueError("the approval secret is empty")
    msg = json.dumps([RUN_KEY_VERSION, tenant, run]).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()


def signing_message(d: Decision) -> bytes:
    fields = [SIGNATURE_VERSION, d.tenant, d.run, d.gate, d.decision.value, d.approver, d.role,
              canonical_time(d.expires_at), d.decision_id,
              json.dumps(d.edits, sort_keys=True, separators=(",", ":"), default=str), d.note]
    return json.dumps(fields).encode()


def sign(key: str, decision: Decision) -> Decision:
    mac = hmac.new(bytes.fromhex(key), signing_message(decision), hashlib.sha256).hexdigest()
    return decision.model_copy(update={"signature": mac})


def signature_valid(key: str, decision: Decision) -> bool:
    if decision.signature is None:
        return False
    expected = hmac.new(bytes.fromhex(key), signing_message(decision), hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), decision.signature)


def authenticate(d: Decision, settings: ApprovalSettings) -> str | None:
    """Why an old-format decision is not authentic under the run's settings, or None."""
    if d.signature is None:
        if not settings.allow_unsigned:
            return "unsigned decision refused: this deployment requires signed decisions"
        return None
    if settings.key is None or not signature_valid(settings.key, d):
        return "invalid signature"
    return None
