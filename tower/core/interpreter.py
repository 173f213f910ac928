"""What a node-driven run does next, decided without doing it.

The workflow (tower/temporal/_runtime.py, gating.py) and the in-process runner
(tower/testing/_inprocess.py) ask these functions and carry the answer out — run a node,
open a gate or wait on one a carried-over run left open, take a node's update, end a
request — so the two cannot drift. Pure: no I/O, no clock, no Temporal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict
from tower.core.gates import Gate, canonical_time, needs_gate, pending_record
from tower.core.graph import FAILED, Machine
from tower.core.state import AgentState, Message, UpdateError, apply_update


@dataclass(frozen=True)
class RunNode:
    node: str


@dataclass(frozen=True)
class Hold:
    """Open ``gate`` (with the node's ``update``, for a gate after it), or go on waiting on
    the request a run continued-as-new left open (``resume``)."""

    gate: Gate
    update: Mapping[str, Any] | None = None
    calls: list[str] = field(default_factory=list)
    resume: bool = False


@dataclass(frozen=True)
class Advance:
    node: str
    update: Mapping[str, Any]
    calls: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Close:
    """End the pending request with ``status`` and move to ``target``."""

    status: GateStatus
    target: str
    decision: Decision | None = None
    why: str = ""
    update: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Recheck:
    """Approved, but the gate re-checks the world before the node acts."""

    decision: Decision


def next_step(machine: Machine, state: AgentState) -> RunNode | Hold:
    """The step of a run standing on a (non-terminal) node."""
    gate = machine.gates.get(state.node)
    if gate is None:
        return RunNode(state.node)
    pending = pending_record(state)
    if pending is not None and pending.gate == gate.name:
        return Hold(gate, resume=True)
    if gate.when == "before" and needs_gate(state, gate):
        return Hold(gate)
    return RunNode(state.node)


def after_node(machine: Machine, state: AgentState, node: str, update: Mapping[str, Any],
               calls: list[str]) -> Advance | Hold:
    """What a node's update leads to: its move, or a gate after the node."""
    gate = machine.gates.get(node)
    if gate is not None and gate.when == "after" and _needs_after(state, gate, update):
        return Hold(gate, update, calls)
    return Advance(node, update, calls)


def decided(gate: Gate, pending: GateRecord, decision: Decision | None) -> Close | Recheck:
    """How a request ends: no decision by its expiry, a rejection, or an approval."""
    if decision is None:
        return Close(GateStatus.EXPIRED, gate.on_timeout,
                     why=f"no decision by {canonical_time(pending.expires_at)}")
    if decision.decision == Verdict.REJECT:
        return Close(GateStatus.REJECTED, gate.on_reject, decision)
    if gate.recheck is not None:
        return Recheck(decision)
    return approved(gate, decision)


def rechecked(gate: Gate, decision: Decision, *, stale: str | None = None,
              failed: str | None = None) -> Close:
    """An approval after its re-check: carried out, re-planned (stale), or FAILED."""
    if failed is not None:
        why = f"re-check failed: {failed}"
        return Close(GateStatus.APPROVED, FAILED, decision, why, {"errors": [why]})
    if stale:
        assert gate.on_stale is not None
        note = Message(role="system", content="The approved action was not carried out "
                       f"because the world changed: {stale}. Plan again.")
        return Close(GateStatus.STALE, gate.on_stale, decision, stale, {"messages": [note]})
    return approved(gate, decision)


def approved(gate: Gate, decision: Decision) -> Close:
    return Close(GateStatus.APPROVED, gate.node, decision, update=decision.edits)


def moves_on_after_approval(gate: Gate, state: AgentState) -> bool:
    """A gate after its node: once approved, the node's move is taken at once."""
    return gate.when == "after" and state.node == gate.node


def _needs_after(state: AgentState, gate: Gate, update: Mapping[str, Any]) -> bool:
    try:
        return needs_gate(apply_update(state, update), gate)
    except UpdateError:
        return False  # advance() fails the run with the reason
