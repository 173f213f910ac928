"""One step of a machine, as a pure function, and the transition log it writes.

``advance`` takes the state, the node that just ran and its update, and returns
the next state and the log entry. It never raises for a bad run: an update that
does not apply, an illegal move or an exceeded budget all become a logged move
(to FAILED or to the budget's escalation node). Time and the history event id
come from the caller, so this module never touches a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tower.core.errors import IllegalTransition
from tower.core.graph import FAILED, START, TERMINALS, Machine
from tower.core.state import (
    NodeError,
    S,
    UpdateError,
    apply_update,
    set_engine_fields,
)
from tower.core.transition import (
    Kind,
    Transition,
    move,
    over_budget,
    status_for,
    within_budget,
)

__all__ = ["Kind", "Transition", "advance", "fail", "node_error", "over_budget", "start",
           "status_for"]


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
    calls = calls or []
    try:
        merged = apply_update(state, update)
    except UpdateError as exc:
        return fail(machine, state, f"bad update from {node}: {exc}", at=at, event_id=event_id,
                    calls=calls)
    try:
        choice = machine.choose(node, merged)
    except IllegalTransition as exc:
        return fail(machine, merged, str(exc), at=at, event_id=event_id, update=update,
                    calls=calls)
    kind = Kind.NODE if machine.transitions[node].route is None else Kind.ROUTE
    merged, target, kind, reason = within_budget(machine, merged, choice.target, kind,
                                                 choice.reason)
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
    calls = calls or []
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
