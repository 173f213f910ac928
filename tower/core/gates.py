"""Approval gates, pure: what a gate is, the moves it makes, what a decision must prove,
and what approvers see of a pending request.

Opening a gate keeps the run at its node, AWAITING_APPROVAL, with a pending ``GateRecord``;
closing it marks the record and stays at the node (an approval before it runs) or moves to
the gate's target. Holding does not count as a visit: gates never eat a visit budget.

A decision is judged in two parts, each refusal with its ``Code``: ``read_decision`` (its
token, signer and claims, against the run's roster) and ``check_decision`` (against the
pending request). A decision is bound to its run by the Temporal run id its request was
opened in, never the workflow id, so a history judges alike under any id.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_jsonable_python

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    ProposalNotCanonical,
    SignedDecision,
    Verdict,
    canonical_proposal,
    proposal_digest,
)
from tower.contract.failures import Code, IllegalTransition, brief
from tower.contract.pending import (
    MAX_EARLIER,
    EarlierDecision,
    EditableField,
    EditLimit,
    PendingView,
    short,
)
from tower.contract.trust import Claims, TrustSnapshot
from tower.core.edits import EditCheck, check_edits
from tower.core.engine import Kind, Transition, fail, move, within_budget
from tower.core.graph import Machine
from tower.core.signing import SignatureRefused, authority, verify_decision
from tower.core.state import AgentState, S, Status, UpdateError, apply_update

Recheck = Callable[[Any, Any], Awaitable[str | None]]  # (ctx, state) -> why stale, or None


@dataclass(frozen=True)
class Gate:
    """An approval point on a node: ``Graph.gate(node, Gate(...))``.

    Attributes:
        name: the gate id decisions name; role: the role an approver must hold.
        timeout: how long the request stays open (a callable reads it from the state).
        on_reject, on_timeout: where a rejection and an expired request go.
        when: "before" the node runs, or "after" it ran (its update is what is approved).
        applies: whether this visit needs approval at all (default: always).
        proposal: what the approver sees; editable: state fields an approval may change.
        limits: each editable field's bounds, from the planned state (``min``, ``max``,
            ``rule``: "lower only" or "higher only"): shown on forms, enforced by the engine.
        check_edits: one more rule, ``(planned, edits) -> problem or None``, after ``limits``.
        recheck: runs on approval, may call tools; returns why the world changed.
        on_stale: where the run goes when ``recheck`` finds it stale."""

    name: str
    role: str
    timeout: timedelta | Callable[[Any], timedelta]
    on_reject: str
    on_timeout: str
    when: Literal["before", "after"] = "before"
    applies: Callable[[Any], bool] | None = None
    proposal: Callable[[Any], Mapping[str, Any]] | None = None
    editable: tuple[str, ...] = ()
    check_edits: EditCheck | None = None
    recheck: Recheck | None = None
    on_stale: str | None = None
    limits: Callable[[Any], Mapping[str, EditLimit]] | None = None
    node: str = ""  # set by Graph.gate

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.on_reject, self.on_timeout, *([self.on_stale] if self.on_stale else []))

    def timeout_for(self, state: Any) -> timedelta:
        return self.timeout(state) if callable(self.timeout) else self.timeout

    def needed(self, state: Any) -> bool:
        return self.applies is None or bool(self.applies(state))


class Refusal(BaseModel):
    """A refused decision, kept in the run's audit trail (signals) or returned (updates)."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    via: Literal["signal", "update"]
    reason: str
    code: Code | None = None  # what every surface reads (the reason is for people)
    decision_id: str = ""
    gate: str = ""
    approver: str = ""
    decision: str = ""


class Outcome(BaseModel):
    """What the run reports back for a decision."""

    decision_id: str
    gate: str
    result: GateStatus
    reason: str = ""
    node: str
    status: str
    step: int
    duplicate: bool = False
    requested_step: int = 0  # the step that opened the request


def outcome(record: GateRecord, decision_id: str, state: AgentState,
            duplicate: bool = False) -> Outcome:
    return Outcome(decision_id=decision_id, gate=record.gate, result=record.status,
                   reason=record.reason, node=state.node, status=state.status.value,
                   step=state.step, duplicate=duplicate, requested_step=record.step)


def needs_gate(state: AgentState, gate: Gate) -> bool:
    """Whether this visit of the gate's node still needs a decision."""
    visit = state.visits.get(gate.node, 0)
    if any(r.gate == gate.name and r.visit == visit for r in state.approvals):
        return False
    return gate.needed(state)


def open_gate(
    machine: Machine, state: S, gate: Gate, *, at: datetime, event_id: int, run_id: str,
    update: Mapping[str, Any] | None = None, calls: list[str] | None = None,
    role: str | None = None, min_review: timedelta = timedelta(0),
) -> tuple[S, Transition]:
    """Record a pending approval and hold the run at the gate's node; ``run_id`` is the
    Temporal run it opens in, ``role`` and ``min_review`` the tenant's policy for the gate."""
    try:
        merged = apply_update(state, update or {})
    except UpdateError as exc:
        return fail(machine, state, f"bad update from {gate.node}: {exc}", at=at,
                    event_id=event_id, calls=calls)
    expires = at + max(gate.timeout_for(merged), min_review)
    role = role or gate.role
    record = GateRecord(
        gate=gate.name, node=gate.node, when=gate.when, visit=merged.visits.get(gate.node, 0),
        step=merged.step + 1, role=role, run_id=run_id,
        proposal=to_jsonable_python(dict(gate.proposal(merged)) if gate.proposal else {}),
        editable=list(gate.editable), requested_at=at, expires_at=expires,
        limits={k: v for k, v in (gate.limits(merged) if gate.limits else {}).items()
                if k in gate.editable},
    )
    try:  # a proposal no client could digest is never put to an approver
        proposal_digest(record)
    except ProposalNotCanonical as exc:
        return fail(machine, merged, f"gate {gate.name}: {exc}", at=at, event_id=event_id,
                    calls=calls)
    reason = (f"gate {gate.name}: awaiting approval by role {role} until "
              f"{canonical_time(expires)}")
    return move(machine, merged, gate.node, gate.node, Kind.GATE, reason, at=at,
                event_id=event_id, update=update, calls=calls, status=Status.AWAITING_APPROVAL,
                approvals=[*merged.approvals, record])


def close_gate(
    machine: Machine, state: S, gate: Gate, status: GateStatus, *, target: str,
    at: datetime, event_id: int, decision: Decision | None = None, why: str = "",
    update: Mapping[str, Any] | None = None, calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """Mark the pending request and stay at the node (``target == gate.node``) or move on."""
    pending = pending_record(state)
    if pending is None or pending.gate != gate.name:
        raise IllegalTransition(state.node, target, f"gate {gate.name} is not pending")
    if not machine.declared(gate.node, target):
        raise IllegalTransition(gate.node, target, f"not a declared route of gate {gate.name}")
    closed = pending.model_copy(update={"status": status, "decision": decision, "reason": why})
    approvals = [closed if r is pending else r for r in state.approvals]
    try:
        merged = apply_update(state, update or {})
    except UpdateError as exc:  # edits are checked before they are accepted; defence in depth
        return fail(machine, state, f"gate {gate.name}: {exc}", at=at, event_id=event_id)
    reason, kind = _reason(gate, status, decision, why), Kind.GATE
    if target != gate.node:
        merged, target, kind, reason = within_budget(machine, merged, target, kind, reason)
    return move(machine, merged, gate.node, target, kind, reason, at=at, event_id=event_id,
                update=update, calls=calls, approvals=approvals)


def _reason(gate: Gate, status: GateStatus, decision: Decision | None, why: str) -> str:
    head = f"gate {gate.name}: {status.value}"
    if decision is not None:
        signed = "signed" if decision.signed else "UNSIGNED"
        head += f" by {decision.approver} ({decision.role}, {signed})"
        if decision.note:
            head += f": {decision.note}"
    return f"{head} — {why}" if why else head


# --- what a decision must prove -----------------------------------------------------------


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
        return None, refuse(Code.MALFORMED, f"malformed decision: {brief(exc)}")
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
            return None, refuse(Code.MALFORMED, f"malformed decision: {brief(exc)}")
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


def _substance(d: Decision) -> str:
    """What makes two deliveries the same decision (not when or how it was signed)."""
    return json.dumps(d.model_dump(mode="json", exclude={"decision_id", "expires_at", "kid"}),
                      sort_keys=True, default=str)


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


# --- what approvers see ------------------------------------------------------------------

# An editable field's input type: int, float, str or bool (str when unsure).
_TYPES: dict[Any, Any] = {int: "int", float: "float", str: "str", bool: "bool"}


def pending_view(machine: Machine, state: AgentState) -> PendingView | None:
    """The pending request of ``state`` as approvers see it, with its canonical proposal
    (``shown``), or None when nothing waits."""
    record = pending_record(state)
    if record is None:
        return None
    info = machine.state_type.model_fields
    fields = [EditableField(
        name=name, type=_TYPES.get(getattr(info.get(name), "annotation", None), "str"),
        value=getattr(state, name, None), limit=record.limits.get(name, EditLimit()))
        for name in record.editable]
    earlier = [EarlierDecision(
        gate=r.gate, status=r.status.value, requested_at=r.requested_at,
        reason=short(r.reason), approver=r.decision.approver if r.decision else "",
        role=r.decision.role if r.decision else "",
        note=short(r.decision.note) if r.decision else "")
        for r in state.approvals if r.status != GateStatus.PENDING][-MAX_EARLIER:]
    return PendingView(
        agent=machine.name, node=record.node, gate=record.gate, when=record.when,
        role=record.role, step=record.step, requested_at=record.requested_at,
        expires_at=record.expires_at, editable=list(record.editable), fields=fields,
        earlier=earlier, shown=canonical_proposal(record))
