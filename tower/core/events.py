"""Event-driven machines: the same Machine, guards, budgets and log, moved by events.

An event-driven run waits in a state until an event arrives (a signal, or its entry
action's result), merges it and lets the state's guards decide the move. ``apply_event``
returns the next state and move or raises and changes nothing: ``DuplicateEvent``,
``StaleEvent`` (another step's), ``EventRejected`` (does not fit), ``IllegalTransition``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from tower.contract.failures import Code, IllegalTransition, TowerError
from tower.core.engine import Kind, Transition, move, within_budget
from tower.core.graph import TERMINALS, Guard, Machine
from tower.core.state import S, UpdateError, apply_update


class EventRejected(TowerError):
    """An event that cannot be applied; the run's state is unchanged."""

    CODE = Code.EVENT_REFUSED


class DuplicateEvent(EventRejected):
    """The same event (step and content hash) was already accepted: at-least-once
    delivery must never advance the run twice."""


class StaleEvent(EventRejected):
    """The event was addressed to a step the run is no longer (or not yet) at."""


class Event(BaseModel):
    """One event, already validated by the agent's own event model."""

    model_config = ConfigDict(frozen=True)

    step: int  # the step the sender saw; the event applies to that step only
    data: dict[str, Any]
    source: str = "signal"  # "signal", "input" or "action:<STATE>"

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.data, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def key(self) -> str:
        """What makes two deliveries the same event (the run is implicit)."""
        return f"{self.step}:{self.digest}"


class Rejection(BaseModel):
    """A refused event, kept in the run's audit trail: never silently dropped."""

    model_config = ConfigDict(frozen=True)

    step: int  # the run's step when the event was refused
    node: str
    source: str
    event: Any
    reason: str
    at: datetime


def apply_event(
    machine: Machine, state: S, event: Event, update: Mapping[str, Any], *,
    accepted: Collection[str], at: datetime, event_id: int, calls: list[str] | None = None,
) -> tuple[S, Transition]:
    """Merge ``update`` (what ``event`` changes) and take the move the guards admit."""
    if state.node in TERMINALS:
        raise IllegalTransition(state.node, "?", f"{state.node} is terminal")
    if event.key in accepted:
        raise DuplicateEvent(f"duplicate event {event.digest} at step {event.step}")
    if event.step != state.step:
        raise StaleEvent(f"event for step {event.step}, but the run is at step {state.step}")
    try:
        merged = apply_update(state, update)
    except UpdateError as exc:
        raise EventRejected(f"event does not fit the state: {exc}") from exc
    choice = machine.choose(state.node, merged)  # IllegalTransition: nothing changes
    reason = f"event {event.digest[:8]} ({event.source}): {choice.reason}"
    merged, target, kind, reason = within_budget(machine, merged, choice.target, Kind.EVENT,
                                                 reason)
    return move(machine, merged, state.node, target, kind, reason, at=at, event_id=event_id,
                update=update, calls=calls)


def by_guards(source: str, guards: Mapping[str, Guard]) -> Callable[[Any], str]:
    """A route to where exactly one guard holds (a row of a guard table): none or two is
    an IllegalTransition, so such an event never moves the run."""

    def guards_fn(state: Any) -> str:
        holding = [target for target, guard in guards.items() if guard(state)]
        if len(holding) != 1:
            names = ", ".join(f"{t} if {g.__name__}" for t, g in guards.items())
            why = "no guard admits the event" if not holding else (
                f"ambiguous: {', '.join(holding)} all admit it")
            raise IllegalTransition(source, "?", f"{why} ({names})")
        return holding[0]

    guards_fn.__name__ = "guards"
    return guards_fn
