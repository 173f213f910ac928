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

from pydantic import BaseModel, ConfigDict
from pydantic_core import to_jsonable_python

from tower.core.errors import IllegalTransition
from tower.core.graph import DONE, FAILED, START, TERMINALS, Machine
from tower.core.state import (
    AgentState,
    NodeError,
    S,
    Status,
    UpdateError,
    apply_update,
    set_engine_fields,
)


class Transition(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    source: str
    target: str
    reason: str
    update: dict[str, Any] = {}
    at: datetime
    event_id: int = 0
    calls: list[str] = []  # what answered inside the node: "model:scripted", "tool:x"


OPERATOR_PREFIX = "operator:"


def status_for(node: str) -> Status:
    return {DONE: Status.DONE, FAILED: Status.FAILED}.get(node, Status.RUNNING)


def start(machine: Machine, state: S, *, at: datetime, event_id: int) -> tuple[S, Transition]:
    """The first move, START -> entry."""
    return _move(machine, state, START, machine.entry, "start", {}, at, event_id, [])


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
    target, reason = choice.target, choice.reason
    over = over_budget(machine, merged, target)
    if over:
        target, reason = escalation(machine, merged, over)
        merged = apply_update(merged, {"errors": [over]})
    return _move(machine, merged, node, target, reason, dict(update), at, event_id, calls)


def fail(
    machine: Machine, state: S, why: str, *, at: datetime, event_id: int,
    update: Mapping[str, Any] | None = None, calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """Move to FAILED, recording why. The move that was asked for does not happen."""
    failed = apply_update(state, {"errors": [why]})
    return _move(machine, failed, state.node, FAILED, why, dict(update or {}), at, event_id,
                 calls or [])


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
    return _move(machine, errored, node, target, f"error in {node}: {why}", {}, at, event_id,
                 calls)


def operator_retry(
    machine: Machine, state: S, node: str, by: str, *, at: datetime, event_id: int
) -> tuple[S, Transition]:
    """The only way out of FAILED: an operator names the node to retry from."""
    check_operator_retry(machine, state, node)
    retried = set_engine_fields(state, last_error=None)
    return _move(machine, retried, FAILED, node, f"{OPERATOR_PREFIX} retry by {by}", {}, at,
                 event_id, [])


def check_operator_retry(machine: Machine, state: AgentState, node: str) -> None:
    """Raise IllegalTransition (changing nothing) unless ``node`` can be retried from."""
    if state.node != FAILED:
        raise IllegalTransition(state.node, node, "only a FAILED run can be retried")
    if node not in machine.nodes:
        known = ", ".join(machine.nodes)
        raise IllegalTransition(state.node, node,
                                f"{node!r} is not a node of {machine.name} (nodes: {known})")


def operator_abort(
    machine: Machine, state: S, by: str, why: str, *, at: datetime, event_id: int
) -> tuple[S, Transition]:
    """An operator gives up on a FAILED run: it stays FAILED and closes, reason recorded."""
    if state.node != FAILED:
        raise IllegalTransition(state.node, FAILED, "only a FAILED run can be aborted")
    note = f"aborted by {by}" + (f": {why}" if why else "")
    aborted = apply_update(state, {"errors": [note]})
    return _move(machine, aborted, FAILED, FAILED, f"{OPERATOR_PREFIX} abort by {by}", {}, at,
                 event_id, [])


def over_budget(machine: Machine, state: AgentState, target: str) -> str | None:
    """Why entering ``target`` would exceed the budget, or None."""
    budget = machine.budget
    if budget is None or target in TERMINALS:
        return None
    if budget.max_steps is not None and state.step + 1 > budget.max_steps:
        return f"step budget exceeded ({budget.max_steps} steps)"
    limit = budget.max_visits.get(target)
    if limit is not None and state.visits.get(target, 0) + 1 > limit:
        return f"loop budget exceeded ({target} visited {limit} times)"
    used = state.usage
    if budget.max_tokens is not None and used.tokens > budget.max_tokens:
        return f"token budget exceeded ({used.tokens} tokens > {budget.max_tokens})"
    if budget.max_cost_usd is not None and used.cost_usd > budget.max_cost_usd:
        return f"cost budget exceeded (${used.cost_usd:.6f} > ${budget.max_cost_usd:g})"
    return None


def escalation(machine: Machine, state: AgentState, why: str) -> tuple[str, str]:
    assert machine.budget is not None
    target = machine.budget.escalate_to
    # Escalating twice means the escalation path itself ran out of budget: stop.
    if target in state.visits:
        return FAILED, why
    return target, why


def _move(
    machine: Machine, state: S, source: str, target: str, reason: str,
    update: dict[str, Any], at: datetime, event_id: int, calls: list[str],
) -> tuple[S, Transition]:
    operator = source == FAILED and reason.startswith(OPERATOR_PREFIX)
    if not (operator or machine.declared(source, target)):
        # The runtime only ever asks for declared moves; this is the last line of defence.
        raise IllegalTransition(source, target, "not declared in the graph")
    step = state.step + 1
    visits = dict(state.visits)
    if target not in TERMINALS:
        visits[target] = visits.get(target, 0) + 1
    new = set_engine_fields(state, step=step, node=target, status=status_for(target),
                            visits=visits)
    return new, Transition(step=step, source=source, target=target, reason=reason,
                           update=to_jsonable_python(update), at=at, event_id=event_id, calls=calls)
