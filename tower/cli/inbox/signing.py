"""Sign a decision made in the inbox: a JWS under the inbox's own issuer key.

The inbox is a member of the tenant's roster whose ``vouches_for`` lists the roles it
may vouch for (docs/approvals.md). Its token's ``sub`` is the approver the inbox
authenticated (never a form field) and ``role`` is the gate's role, which the inbox
checked the approver holds; the run verifies the token as it verifies one from
`tower approve`, and refuses a role the issuer may not vouch for.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from tower.cli.inbox.forms import DecisionForm, FormError
from tower.contract import names
from tower.contract.decisions import GateRecord, canonical_proposal, proposal_digest
from tower.contract.pending import PendingView
from tower.core.signing import decision_claims, sign

LIFETIME_SECONDS = 300  # a decision is sent at once; it need not live long
QUERY_SECONDS = 5.0


async def shown_request(client: Client, run: str, view: PendingView
                        ) -> tuple[GateRecord, str] | None:
    """The run's pending request (its ``approvals`` query) when it is the one ``view``
    shows: same gate, step, node, role, editable fields and the whole canonical proposal;
    with the digest a decision on it names (``proposal_digest``).
    None when no worker answers or it differs: then nothing is signed."""
    try:
        approvals = await asyncio.wait_for(client.get_workflow_handle(run).query(
            names.APPROVALS.name, result_type=dict), QUERY_SECONDS)
        record = GateRecord.model_validate(approvals["pending"])
    except (TimeoutError, RPCError, ValidationError, KeyError, TypeError):
        return None
    same = ((record.gate, record.step, record.node, record.role, record.editable)
            == (view.gate, view.step, view.node, view.role, view.editable)
            and canonical_proposal(record) == view.shown)
    return (record, proposal_digest(record)) if same else None


def signed_decision(*, issuer: Mapping[str, Any], tenant: str, run: str, request: GateRecord,
                    digest: str, approver: str, form: DecisionForm) -> dict[str, Any]:
    """The wire message of the decision ``approver`` made in ``form`` on ``request``: it
    names the request's run id, step and proposal ``digest`` (what the page showed)."""
    try:
        claims = decision_claims(
            tenant=tenant, run=run, run_id=request.run_id, gate=request.gate,
            request=request.step, proposal=digest,
            verdict=form.verdict.value, sub=approver, role=request.role, edits=form.edits,
            note=form.note, jti=f"inbox-{uuid.uuid4().hex[:16]}", lifetime=LIFETIME_SECONDS,
            now=time.time())
    except ValidationError as exc:
        raise FormError(f"cannot sign this decision: {exc.errors()[0]['msg']}") from None
    return {"token": sign(claims, dict(issuer))}
