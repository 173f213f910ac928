"""One step of a machine, as pure functions, and the transition log it writes.

Every change of a run's step (a node's edge or route, a gate opening or closing, a budget
escalation, an accepted event) is made by ``move``, which returns the new state with its
``Transition``; its ``kind`` says what made the move (the reason text is for people).
``advance`` never raises for a bad run: an update that does not apply, an illegal move or
an exceeded budget become a logged move to FAILED or the escalation node. No clock: the
time and history event id come from the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from tower.contract.decisions import GateRecord
from tower.contract.failures import IllegalTransition
from tower.core.graph import FAILED, START, TERMINALS, Machine
from tower.core.state import (
    AgentState,
    NodeError,
    S,
    Status,
    UpdateError,
    apply_update,
    set_engine_fields,
)


class Kind(StrEnum):
    """What made a move."""

    NODE = "node"  # START -> entry, a node's static edge, its failure or error recovery
    ROUTE = "route"  # a route function picked the target
    GATE = "gate"  # a gate opened (the run holds at its node) or closed
    BUDGET = "budget"  # a budget ran out: the move to the escalation node
    EVENT = "event"  # an event accepted by an event-driven machine


class Transition(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    source: str
    target: str
    reason: str  # for people: the route's pick, the guard, the gate's decision
    update: dict[str, Any] = {}
    at: datetime
    event_id: int = 0
    calls: list[str] = []  # what answered inside the node: "model:scripted", "tool:x"
    kind: Kind = Kind.NODE


def move(
    machine: Machine, state: S, source: str, target: str, kind: Kind, reason: str, *,
    at: datetime, event_id: int, update: Mapping[str, Any] | None = None,
    calls: list[str] | None = None, status: Status | None = None,
    approvals: list[GateRecord] | None = None,
) -> tuple[S, Transition]:
    """Take ``source -> target`` on ``state`` (already merged with the move's update).

    Entering a node counts a visit, except a gate holding the run at its own node, so gates
    never eat into a node's visit budget. ``status`` defaults to the target's; ``approvals``
    replaces the gate records (only gates pass it).
    """
    if not machine.declared(source, target):
        # The runtime only ever asks for declared moves; this is the last line of defence.
        raise IllegalTransition(source, target, "not declared in the graph")
    step = state.step + 1
    visits = dict(state.visits)
    holding = kind == Kind.GATE and target == source
    if target not in TERMINALS and not holding:
        visits[target] = visits.get(target, 0) + 1
    status = status or Status(target if target in TERMINALS else "RUNNING")
    fields: dict[str, Any] = {"step": step, "node": target, "visits": visits, "status": status}
    if approvals is not None:
        fields["approvals"] = approvals
    new = set_engine_fields(state, **fields)
    return new, Transition(step=step, source=source, target=target, reason=reason, kind=kind,
                           update=to_jsonable_python(dict(update or {})), at=at,
                           event_id=event_id, calls=list(calls or []))


def over_budget(machine: Machine, state: AgentState, target: str) -> str | None:
    """Why entering ``target`` would exceed the budget, or None."""
    budget = machine.budget
    if budget is None or target in TERMINALS:
        return None
    if budget.max_steps is not None and state.step + 1 > budget.max_steps:
        return f"step budget exceeded ({_times(budget.max_steps, 'step')})"
    limit = budget.max_visits.get(target)
    if limit is not None and state.visits.get(target, 0) + 1 > limit:
        return f"loop budget exceeded ({target} visited {_times(limit, 'time')})"
    used = state.usage
    if budget.max_tokens is not None and used.tokens > budget.max_tokens:
        return f"token budget exceeded ({used.tokens} tokens > {budget.max_tokens})"
    if budget.max_cost_usd is not None and used.cost_usd > budget.max_cost_usd:
        return f"cost budget exceeded (${used.cost_usd:.6f} > ${budget.max_cost_usd:g})"
    return None


def within_budget(
    machine: Machine, state: S, target: str, kind: Kind, reason: str,
) -> tuple[S, str, Kind, str]:
    """The move to make instead of ``target`` when entering it would exceed the budget:
    (state with the error recorded, the escalation node, BUDGET, why); else unchanged."""
    over = over_budget(machine, state, target)
    if not over:
        return state, target, kind, reason
    assert machine.budget is not None
    escalate_to = machine.budget.escalate_to
    # Escalating twice means the escalation path itself ran out of budget: stop.
    target = FAILED if escalate_to in state.visits else escalate_to
    return apply_update(state, {"errors": [over]}), target, Kind.BUDGET, over


def _times(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def start(machine: Machine, state: S, *, at: datetime, event_id: int) -> tuple[S, Transition]:
    """The first move, START -> entry."""
    return move(machine, state, START, machine.entry, Kind.NODE, "start", at=at,
                event_id=event_id)


def advance(
    machine: Machine, state: S, node: str, update: Mapping[str, Any], *,
    at: datetime, event_id: int, calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """Apply ``update`` from ``node`` and take the transition the graph allows."""
    if state.node in TERMINALS:
        raise IllegalTransition(state.node, "?", f"{state.node} is terminal")
    try:
        merged = apply_update(state, update)
    except UpdateError as exc:
        return fail(machine, state, f"bad update from {node}: {exc}", at=at, event_id=event_id,
                    calls=calls)
    try:
        target, reason = machine.choose(node, merged)
    except IllegalTransition as exc:
        return fail(machine, merged, str(exc), at=at, event_id=event_id, update=update,
                    calls=calls)
    kind = Kind.NODE if machine.transitions[node].route is None else Kind.ROUTE
    merged, target, kind, reason = within_budget(machine, merged, target, kind, reason)
    return move(machine, merged, node, target, kind, reason, at=at, event_id=event_id,
                update=update, calls=calls)


def fail(
    machine: Machine, state: S, why: str, *, at: datetime, event_id: int,
    update: Mapping[str, Any] | None = None, calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """Move to FAILED, recording why. The move that was asked for does not happen."""
    failed = apply_update(state, {"errors": [why]})
    return move(machine, failed, state.node, FAILED, Kind.NODE, why, at=at, event_id=event_id,
                update=update, calls=calls)


def node_error(
    machine: Machine, state: S, node: str, why: str, *, at: datetime, event_id: int,
    calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """``node`` raised instead of returning an update: record the error in
    ``errors`` and ``last_error``, then go to the node's recovery node
    (``Graph.on_error``) or, without one or past its budget, to FAILED."""
    errored = set_engine_fields(state, last_error=NodeError(node=node, error=why,
                                                            step=state.step))
    target = machine.recovery.get(node)
    if target is None:
        return fail(machine, errored, why, at=at, event_id=event_id, calls=calls)
    over = over_budget(machine, errored, target)
    if over:
        return fail(machine, errored, f"recovery exhausted ({over}); last error: {why}",
                    at=at, event_id=event_id, calls=calls)
    errored = apply_update(errored, {"errors": [f"{node}: {why}"]})
    return move(machine, errored, node, target, Kind.NODE, f"error in {node}: {why}", at=at,
                event_id=event_id, calls=calls)
