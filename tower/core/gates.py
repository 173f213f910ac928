"""The moves a gate makes, as pure functions (no Temporal), logged like every other step.

Opening a gate is a step that keeps the run at its node with status AWAITING_APPROVAL
and a pending ``GateRecord``; closing it is a step that marks the record (approved,
rejected, expired, stale) and either stays at the node (an approval before it runs)
or moves to the gate's declared target. Holding at a node does not count as a visit,
so gates never eat into a node's visit budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic_core import to_jsonable_python

from tower.contract.decisions import Decision, GateRecord, GateStatus
from tower.core.approval import Gate, canonical_time, pending_record
from tower.core.engine import fail
from tower.core.errors import IllegalTransition
from tower.core.graph import Machine
from tower.core.state import AgentState, S, Status, UpdateError, apply_update
from tower.core.transition import Kind, Transition, move, within_budget


def needs_gate(state: AgentState, gate: Gate) -> bool:
    """Whether this visit of the gate's node still needs a decision."""
    visit = state.visits.get(gate.node, 0)
    if any(r.gate == gate.name and r.visit == visit for r in state.approvals):
        return False
    return gate.needed(state)


def approving_decision(state: AgentState, node: str) -> str:
    """The id of the decision that approved this visit of ``node`` ("" if none): part of
    the key of every side effect the node makes (tower/core/keys.py)."""
    visit = state.visits.get(node, 0)
    for record in reversed(state.approvals):
        if (record.node == node and record.visit == visit
                and record.status == GateStatus.APPROVED and record.decision is not None):
            return record.decision.decision_id
    return ""


def open_gate(
    machine: Machine, state: S, gate: Gate, *, at: datetime, event_id: int,
    update: Mapping[str, Any] | None = None, calls: list[str] | None = None,
    role: str | None = None, min_review: timedelta = timedelta(0),
) -> tuple[S, Transition]:
    """Record a pending approval and hold the run at the gate's node. ``role`` and
    ``min_review`` are the tenant's policy for this gate (its role, its shortest window)."""
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
        step=merged.step + 1, role=role,
        proposal=to_jsonable_python(dict(gate.proposal(merged)) if gate.proposal else {}),
        editable=list(gate.editable), requested_at=at, expires_at=expires,
    )
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

