"""Event-driven machines: the same Machine, guards, budgets and log, moved by events.

An event-driven run waits in a state until an event arrives (a signal, or its entry
action's result), merges it and lets the state's guards decide the move. ``apply_event``
returns the next state and move, or raises (``EventRejected``, ``IllegalTransition``) and
changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from tower.contract.failures import Code, IllegalTransition, TowerError
from tower.core.engine import Kind, Transition, move, within_budget
from tower.core.graph import TERMINALS, Machine
from tower.core.state import S, UpdateError, apply_update


class EventRejected(TowerError):
    """An event that cannot be applied (a duplicate, another step's, or one that does not
    fit); the run's state is unchanged."""

    CODE = Code.EVENT_REFUSED


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
    if event.key in accepted:  # at-least-once delivery never advances the run twice
        raise EventRejected(f"duplicate event {event.digest} at step {event.step}")
    if event.step != state.step:
        raise EventRejected(f"event for step {event.step}, but the run is at step {state.step}")
    try:
        merged = apply_update(state, update)
    except UpdateError as exc:
        raise EventRejected(f"event does not fit the state: {exc}") from exc
    target, why = machine.choose(state.node, merged)  # IllegalTransition: nothing changes
    reason = f"event {event.digest[:8]} ({event.source}): {why}"
    merged, target, kind, reason = within_budget(machine, merged, target, Kind.EVENT, reason)
    return move(machine, merged, state.node, target, kind, reason, at=at, event_id=event_id,
                update=update, calls=calls)

