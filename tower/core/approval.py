"""Approval gates, the pure part: what a gate is, what is pending, what a decision must prove.

No Temporal here: the runtime calls ``check_decision`` from an update validator and a
signal handler, so the rules are one function, unit-tested without a server.

Signatures. A decision is signed with HMAC-SHA256 over its canonical fields (tenant,
run, gate, decision, approver, role, expiry, decision id, edits, note). The key is a
*per-run* key, ``run_key(tenant_secret, tenant, run)``, derived outside the workflow
(by whoever starts the run) and passed in the run's input. Workflow code must not read
env vars or files, and an update validator cannot call an activity, so the key has to
be in the history; deriving it per run means the history never holds the tenant
secret, and a key read from one run's history cannot sign decisions for any other run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict
from tower.core.state import AgentState, UpdateError, apply_update

SIGNATURE_VERSION = "tower-decision-v1"
RUN_KEY_VERSION = "tower-run-key-v1"

Recheck = Callable[[Any, Any], Awaitable[str | None]]  # (ctx, state) -> why stale, or None
EditCheck = Callable[[Any, Mapping[str, Any]], str | None]  # (state, edits) -> problem


@dataclass(frozen=True)
class Gate:
    """An approval point on a node, declared with ``Graph.gate(node, Gate(...))``.

    Attributes:
        name: the gate id decisions name.
        role: the role an approver must hold.
        timeout: how long the request stays open; a callable reads it from the state.
        on_reject: the node a rejection routes to.
        on_timeout: the node an expired request routes to (escalate, auto-reject).
        when: "before" the node runs, or "after" it ran (its update is what is approved).
        applies: whether this visit needs approval at all (default: always).
        proposal: what the approver sees: the proposed action and its arguments.
        editable: state fields an approval may change (e.g. lower an amount).
        check_edits: extra rule on the edits (e.g. the amount may only go down).
        recheck: runs on approval, may call tools; returns why the world changed.
        on_stale: where the run goes when ``recheck`` finds the state stale.
    """

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
    decision_id: str = ""
    gate: str = ""
    approver: str = ""
    decision: str = ""


class ApprovalSettings(BaseModel):
    """How a run verifies decisions; part of a gated agent's input, set by the starter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$",
                            description="per-run key: run_key(tenant secret, tenant, run)")
    # The tenant (Temporal namespace) the key was derived for. Checks read it from here,
    # not from the live namespace, so they give the same answer when a history is
    # replayed elsewhere (a replayer runs under its own namespace).
    tenant: str | None = Field(default=None, min_length=1, max_length=200)
    allow_unsigned: bool = False


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


def canonical_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_key(secret: bytes, tenant: str, run: str) -> str:
    """The per-run verification key, derived from the tenant's secret (outside workflows)."""
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
    """Return ``decision`` carrying its signature under the per-run ``key``."""
    mac = hmac.new(bytes.fromhex(key), signing_message(decision), hashlib.sha256).hexdigest()
    return decision.model_copy(update={"signature": mac})


def signature_valid(key: str, decision: Decision) -> bool:
    if decision.signature is None:
        return False
    expected = hmac.new(bytes.fromhex(key), signing_message(decision), hashlib.sha256)
    return hmac.compare_digest(expected.hexdigest(), decision.signature)


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


def refuse(reason: str) -> Check:
    return Check(False, reason)


def check_decision(
    d: Decision, *, state: AgentState | None, gates: Mapping[str, Gate], tenant: str,
    run: str, now: datetime, settings: ApprovalSettings, in_flight: Decision | None = None,
) -> Check:
    """Whether ``d`` may decide the run's pending gate. Pure; the state is not touched.

    Order matters: who sent it (tenant, run, signature) before what it asks for.
    A decision repeating one already taken (same id, same content) is a duplicate:
    accepted, but it changes nothing.
    """
    if d.tenant != tenant:
        return refuse(f"decision is for tenant {d.tenant!r}; this run belongs to {tenant!r}")
    if d.run != run:
        return refuse(f"decision is for run {d.run!r}, not {run!r}")
    if state is None:  # nothing to decide yet, and the run has not read its key
        return refuse(_not_pending(d.gate, state, gates))
    if d.signature is None:
        if not settings.allow_unsigned:
            return refuse("unsigned decision refused: this deployment requires signed decisions")
    elif settings.key is None or not signature_valid(settings.key, d):
        return refuse("invalid signature")
    for earlier in ([in_flight] if in_flight else []) + [
            r.decision for r in (state.approvals if state else []) if r.decision]:
        if earlier.decision_id == d.decision_id:
            if earlier.model_dump(exclude={"signature"}) != d.model_dump(exclude={"signature"}):
                return refuse(f"decision id {d.decision_id!r} was already used for a "
                              "different decision")
            return Check(True, duplicate=True)
    pending = pending_record(state)
    if pending is None or pending.gate != d.gate:
        return refuse(_not_pending(d.gate, state, gates))
    if in_flight is not None:
        return refuse(f"gate {d.gate!r} was already decided: {in_flight.decision.value} by "
                      f"{in_flight.approver}")
    if d.expires_at != pending.expires_at:
        return refuse(f"decision names a request expiring {canonical_time(d.expires_at)}; the "
                      f"pending request expires {canonical_time(pending.expires_at)}")
    if now >= pending.expires_at:
        return refuse(f"request for gate {d.gate!r} expired at "
                      f"{canonical_time(pending.expires_at)}")
    if d.role != pending.role:
        return refuse(f"role {d.role!r} may not decide gate {d.gate!r} (needs {pending.role!r})")
    assert state is not None
    problem = check_edits(gates[d.gate], state, d)
    return refuse(problem) if problem else Check(True)


def check_edits(gate: Gate, state: AgentState, d: Decision) -> str | None:
    if not d.edits:
        return None
    if d.decision == Verdict.REJECT:
        return "a rejection cannot edit fields"
    bad = sorted(set(d.edits) - set(gate.editable))
    if bad:
        allowed = ", ".join(gate.editable) or "none"
        return f"field(s) {', '.join(bad)} not editable at gate {gate.name!r} (editable: {allowed})"
    try:
        edited = apply_update(state, d.edits)
    except UpdateError as exc:
        return f"edit refused: {exc}"
    if gate.check_edits is not None:
        return gate.check_edits(edited, d.edits)
    return None


def _not_pending(gate: str, state: AgentState | None, gates: Mapping[str, Gate]) -> str:
    if gate not in gates:
        return f"unknown gate {gate!r} (gates: {', '.join(sorted(gates)) or 'none'})"
    if state is None:
        return f"gate {gate!r} is not awaiting a decision: the run has not started"
    last = next((r for r in reversed(state.approvals) if r.gate == gate), None)
    if last is not None and last.status == GateStatus.EXPIRED:
        return f"request for gate {gate!r} expired at {canonical_time(last.expires_at)}"
    if last is not None and last.status != GateStatus.PENDING and last.decision is not None:
        return (f"gate {gate!r} was already decided: {last.decision.decision.value} by "
                f"{last.decision.approver}")
    return (f"gate {gate!r} is not awaiting a decision (the run is at {state.node}, "
            f"{state.status.value})")


def outcome(record: GateRecord, decision_id: str, state: AgentState,
            duplicate: bool = False) -> Outcome:
    return Outcome(decision_id=decision_id, gate=record.gate, result=record.status,
                   reason=record.reason, node=state.node, status=state.status.value,
                   step=state.step, duplicate=duplicate, requested_step=record.step)
