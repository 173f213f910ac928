"""Sign a decision made in the inbox: a JWS under the inbox's own issuer key.

The inbox is a member of the tenant's roster whose ``vouches_for`` lists the roles it
may vouch for (docs/approvals.md). Its token's ``sub`` is the approver the inbox
authenticated (never a form field) and ``role`` is the gate's role, which the inbox
checked the approver holds; the run verifies the token as it verifies one from
`tower approve`, and refuses a role the issuer may not vouch for.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from tower.contract.pending import PendingView
from tower.core.signing import decision_claims, sign
from tower.inbox.forms import DecisionForm, FormError

LIFETIME_SECONDS = 300  # a decision is sent at once; it need not live long


def signed_decision(*, issuer: Mapping[str, Any], tenant: str, run: str, view: PendingView,
                    approver: str, form: DecisionForm) -> dict[str, Any]:
    """The wire message of the decision ``approver`` made in ``form``."""
    try:
        claims = decision_claims(
            tenant=tenant, run=run, gate=view.gate, request=view.step,
            verdict=form.verdict.value, sub=approver, role=view.role, edits=form.edits,
            note=form.note, jti=f"inbox-{uuid.uuid4().hex[:16]}", lifetime=LIFETIME_SECONDS,
            now=time.time())
    except ValidationError as exc:
        raise FormError(f"cannot sign this decision: {exc.errors()[0]['msg']}") from None
    return {"token": sign(claims, dict(issuer))}
