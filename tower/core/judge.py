"""What a decision must prove, pure: ``read_decision`` (its token, signer and claims,
against the run's roster) and ``check_decision`` (against the pending request), each
refusal with its ``Code``. A decision is bound to its run by the Temporal run id its
request was opened in, never the workflow id, so a history judges alike under any id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    SignedDecision,
    Verdict,
    proposal_digest,
)
from tower.contract.failures import Code
from tower.contract.trust import Claims, TrustSnapshot
from tower.core.edits import check_edits
from tower.core.signing import SignatureRefused, authority, verify_decision
from tower.core.state import AgentState

if TYPE_CHECKING:
    from tower.core.gates import Gate

def pending_record(state: AgentState | None) -> GateRecord | None:
    if state is None:
        return None
    return next((r for r in reversed(state.approvals) if r.status == GateStatus.PENDING), None)


def record_of(state: AgentState, decision_id: str) -> GateRecord | None:
    return next((r for r in state.approvals
                 if r.decision is not None and r.decision.decision_id == decision_id), None)


@dataclass(frozen=True)
class Check:
    ok: bool
    reason: str = ""
    duplicate: bool = False
    code: Code | None = None  # why it was refused (None: accepted)
    # Refused for what the run's roster says: no key of the token's key id, or no role the
    # signer claims. Perhaps one enrolled since the roster was read: the run reads it again
    # once, then judges the decision again.
    by_roster: bool = False


def refuse(code: Code, reason: str) -> Check:
    return Check(False, reason, code=code)


def read_decision(raw: Any, *, trust: TrustSnapshot, now: datetime,
                  ) -> tuple[Decision | None, Check]:
    """The decision a wire message proves (and an ok ``Check``), or why it proves nothing;
    the roster and policy from the run's snapshot, the time from its clock."""
    try:
        message = SignedDecision.model_validate(raw)
    except ValidationError as exc:
        return None, refuse(Code.MALFORMED, f"malformed decision: {_brief(exc)}")
    policy = trust.policy
    if message.token is not None:
        try:
            claims, member, kid = verify_decision(message.token, trust.roster,
                                                  now=now.timestamp())
        except SignatureRefused as exc:
            return None, Check(False, str(exc), code=exc.code,
                               by_roster=exc.code == Code.UNKNOWN_KEY)
        problem = authority(member, claims.sub, claims.role)
        if problem:
            return None, Check(False, problem, code=Code.NOT_AUTHORIZED, by_roster=True)
    elif message.unsigned is not None:
        if not policy.unsigned_allowed:
            return None, refuse(Code.POLICY, "unsigned decision refused: this "
                                "deployment requires signed decisions (docs/approvals.md)")
        try:
            claims, kid = Claims.model_validate(message.unsigned), None
        except ValidationError as exc:
            return None, refuse(Code.MALFORMED, f"malformed decision: {_brief(exc)}")
        if claims.exp <= now.timestamp():
            return None, refuse(Code.TOKEN_EXPIRED, f"decision expired at {claims.exp}")
    else:
        return None, refuse(Code.MALFORMED, "malformed decision: no token")
    if claims.exp - claims.iat > policy.max_decision_seconds:
        return None, refuse(Code.POLICY, f"decision lives {claims.exp - claims.iat}s; "
                            f"the tenant's policy allows at most {policy.max_decision_seconds}s")
    return Decision(
        decision_id=claims.jti, tenant=claims.tenant, run=claims.run, gate=claims.gate,
        decision=Verdict(claims.verdict), approver=claims.sub, role=claims.role,
        expires_at=datetime.fromtimestamp(claims.exp, UTC), note=claims.note,
        edits=claims.edits, kid=kid, request=claims.request, run_id=claims.run_id,
        proposal=claims.proposal), Check(True)


def check_decision(
    d: Decision, *, state: AgentState | None, gates: Mapping[str, Gate], tenant: str,
    now: datetime, in_flight: Decision | None = None,
) -> Check:
    """Whether ``d`` (a verified decision) may decide the pending gate; the state is not
    touched. Who sent it is checked before what it asks; a repeat of a decision taken (same
    id, same content) is an accepted duplicate that changes nothing."""
    if d.tenant != tenant:
        return refuse(Code.WRONG_RUN,
                      f"decision is for tenant {d.tenant!r}; this run belongs to {tenant!r}")
    if state is None:  # nothing to decide yet
        return refuse(*_not_pending(d.gate, state, gates))
    for earlier in ([in_flight] if in_flight else []) + [
            r.decision for r in state.approvals if r.decision]:
        if earlier.decision_id == d.decision_id:
            if _substance(earlier) != _substance(d):
                return refuse(Code.ALREADY_DECIDED,
                              f"decision id {d.decision_id!r} was already used for a "
                              "different decision")
            return Check(True, duplicate=True)
    pending = pending_record(state)
    if pending is not None and d.run_id != pending.run_id:
        return refuse(Code.WRONG_RUN, (
            f"decision is for run {d.run!r}, made for run id {d.run_id}; the pending request "
            f"is in run id {pending.run_id} (a reset or a new run voids earlier decisions)"))
    if pending is None or pending.gate != d.gate:
        return refuse(*_not_pending(d.gate, state, gates))
    if in_flight is not None:
        return refuse(Code.ALREADY_DECIDED,
                      f"gate {d.gate!r} was already decided: {in_flight.decision.value} by "
                      f"{in_flight.approver}")
    other = _other_request(d, pending)  # what the approver was shown
    if other:
        return refuse(*other)
    if now >= pending.expires_at:
        return refuse(Code.EXPIRED, f"request for gate {d.gate!r} expired at "
                      f"{canonical_time(pending.expires_at)}")
    if d.role != pending.role:
        return refuse(Code.NOT_AUTHORIZED,
                      f"role {d.role!r} may not decide gate {d.gate!r} (needs {pending.role!r})")
    problem = check_edits(gates[d.gate], state, d)
    return refuse(Code.BAD_EDIT, problem) if problem else Check(True)


def canonical_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _other_request(d: Decision, pending: GateRecord) -> tuple[Code, str] | None:
    """Why ``d`` was made for another step or proposal of this run than the pending one."""
    if d.request != pending.step:
        return Code.WRONG_REQUEST, (
            f"decision answers the request opened at step {d.request}; the pending "
            f"request was opened at step {pending.step}")
    if d.proposal != proposal_digest(pending):
        return Code.WRONG_PROPOSAL, (
            f"decision was made for another proposal ({d.proposal}); the pending "
            f"proposal is {proposal_digest(pending)}: look at it and decide again")
    return None


def _substance(d: Decision) -> tuple[Any, ...]:
    """What makes two deliveries the same decision (not when or how it was signed)."""
    edits = json.dumps(d.edits, sort_keys=True, separators=(",", ":"), default=str)
    return (d.tenant, d.run, d.gate, d.decision, d.approver, d.role, edits, d.note, d.request,
            d.run_id, d.proposal)


def _brief(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}"
                     for e in exc.errors()[:5])


def _not_pending(gate: str, state: AgentState | None, gates: Mapping[str, Gate]
                 ) -> tuple[Code, str]:
    if gate not in gates:
        return Code.NOT_PENDING, (f"unknown gate {gate!r} (gates: "
                                         f"{', '.join(sorted(gates)) or 'none'})")
    if state is None:
        return Code.NOT_PENDING, (f"gate {gate!r} is not awaiting a decision: the run "
                                         "has not started")
    last = next((r for r in reversed(state.approvals) if r.gate == gate), None)
    if last is not None and last.status == GateStatus.EXPIRED:
        return Code.EXPIRED, (f"request for gate {gate!r} expired at "
                                     f"{canonical_time(last.expires_at)}")
    if last is not None and last.status != GateStatus.PENDING and last.decision is not None:
        return Code.ALREADY_DECIDED, (
            f"gate {gate!r} was already decided: {last.decision.decision.value} by "
            f"{last.decision.approver}")
    return Code.NOT_PENDING, (
        f"gate {gate!r} is not awaiting a decision (the run is at {state.node}, "
        f"{state.status.value})")
