"""Approval gates, pure: what a gate is and the moves it makes (what a decision must prove
is tower/core/judge.py's, re-exported here).

Opening a gate keeps the run at its node, AWAITING_APPROVAL, with a pending ``GateRecord``;
closing it marks the record and stays at the node (an approval before it runs) or moves to
the gate's target. Holding does not count as a visit: gates never eat a visit budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from tower.contract.decisions import (
    Decision,
    GateRecord,
    GateStatus,
    ProposalNotCanonical,
    proposal_digest,
)
from tower.contract.failures import Code
from tower.contract.pending import EditLimit
from tower.core.edits import EditCheck
from tower.core.engine import fail
from tower.core.errors import IllegalTransition
from tower.core.graph import Machine
from tower.core.judge import (  # noqa: F401  (re-exported: what a decision must prove)
    Check,
    canonical_time,
    check_decision,
    pending_record,
    read_decision,
    record_of,
    refuse,
)
from tower.core.state import AgentState, S, Status, UpdateError, apply_update
from tower.core.transition import Kind, Transition, move, within_budget

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
        extra = (self.on_stale,) if self.on_stale else ()
        return (self.on_reject, self.on_timeout, *extra)

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
    calls = calls or []
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
    calls = calls or []
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
