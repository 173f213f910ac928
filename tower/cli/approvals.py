"""Decisions on the client side (the CLI, the demo, tests): signed with the approver's own
key, and the client-side check that a run's input does not loosen the tenant's policy.

A decision is a JWS made with ``<config>/keys/<NAME>.jwk`` (``tower keys new NAME``); the
run verifies it against its tenant's roster. ``unsigned=True`` sends the claims in the
clear: only a run whose deployment policy allows unsigned decisions accepts that.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from tower.activities.trust import TrustError, read_trust, trust_dir
from tower.cli.errors import CliError
from tower.cli.keys import sign_decision
from tower.client import TASK_QUEUE
from tower.client._pending import Deployment
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from tower.core.gates import Outcome
from tower.core.policy import PolicyInvalid, PolicyLoosened, effective
from tower.core.signing import decision_claims
from tower.temporal.gating import Gatekeeper


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
    *, tenant: str, run: str, pending: GateRecord, verdict: Verdict, approver: str,
    role: str, note: str = "", edits: dict[str, Any] | None = None,
    decision_id: str | None = None, unsigned: bool = False, config: Path | None = None,
) -> tuple[dict[str, Any], str]:
    """The wire message for a decision on ``pending`` (the request the run showed), and a
    line saying how it was signed. It names the request's run id, step and proposal
    digest: the run accepts it only while that very proposal is pending there."""
    fields: dict[str, Any] = dict(tenant=tenant, run=run, run_id=pending.run_id,
                                  gate=pending.gate, request=pending.step,
                                  proposal=proposal_digest(pending), verdict=verdict.value,
                                  role=role, edits=edits or {}, note=note,
                                  jti=decision_id or f"d-{uuid.uuid4().hex[:12]}")
    if unsigned:
        claims = decision_claims(sub=approver, now=time.time(), **fields)
        return ({"unsigned": claims.model_dump(mode="json")},
                "UNSIGNED (accepted only where the deployment allows unsigned decisions)")
    token, claims = sign_decision(approver, config=config, **fields)
    kid = json.loads(_b64(token.split(".")[0]))["kid"]
    return {"token": token}, f"signed with {approver}'s key {kid}"


# The server aborts an update when it fails, itself, the workflow task that carried it (an
# event arrived while that task closed the run: UnhandledCommand). The decision was not
# taken and the run goes on waiting, so it is sent again; had it been taken, the same
# signed decision would be a duplicate that changes nothing.
RESENDS = 3


async def submit_decision(handle: WorkflowHandle[Any, Any], message: dict[str, Any]) -> Outcome:
    """The run's outcome for ``message`` (the ``decide`` update), sent again while the
    server aborts it with its task. A refusal raises WorkflowUpdateFailedError."""
    resent = 0
    while True:
        try:
            return await handle.execute_update(Gatekeeper.decide, message)
        except RPCError as exc:
            if resent == RESENDS or not aborted_with_its_task(exc):
                raise
            resent += 1


def aborted_with_its_task(exc: RPCError) -> bool:
    return (exc.status == RPCStatusCode.FAILED_PRECONDITION
            and "unexpected workflow task failure" in exc.message)


def _b64(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def check_policy(agent: Any, request: BaseModel, tenant: str,
                 root: Path | None = None) -> None:
    """Refuse, before the run starts, an input that would loosen the tenant's policy. Where
    this client cannot read the deployment's trust directory the run itself refuses it."""
    if getattr(request, "approvals", None) is not None:
        raise CliError("the input carries `approvals` (a key or unsigned mode): those belong "
                       "to the deployment's roster and policy (docs/approvals.md)")
    policy_model = getattr(agent, "Policy", None)
    if policy_model is None:
        return
    try:
        snapshot = read_trust(root or trust_dir(), tenant)
    except TrustError:
        return
    try:
        effective(policy_model, snapshot.policy.agents.get(agent.machine.name, {}), request)
    except (PolicyLoosened, PolicyInvalid) as exc:
        raise CliError(f"this input may not start a run: {exc}") from None


def deployment(tenant: str, root: Path | None = None) -> Deployment:
    """What `tower pending` and the inbox trust: the tenant's roster (its attesting worker
    keys), the project's agents and the deployment's task queues (TOWER_TASK_QUEUES,
    comma-separated; default the one queue ``tower``)."""
    from tower.cli.agents import agents

    try:
        roster = read_trust(root or trust_dir(), tenant).roster
        names = frozenset(agents())
    except (TrustError, ValueError) as exc:
        raise CliError(f"cannot tell genuine requests from forged ones: {exc}") from None
    queues = os.environ.get("TOWER_TASK_QUEUES") or TASK_QUEUE
    return Deployment(roster=roster, agents=names,
                      queues=frozenset(q.strip() for q in queues.split(",") if q.strip()))
