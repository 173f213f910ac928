"""The one loop every run takes, whoever hosts it: run a node, hold at a gate, close the
request, take an event.

A run is hosted on a worker (tower/temporal: every call an activity, the clock
``workflow.now``, each move recorded and published) or in-process (tower/testing: scripted
answers, a test's clock and decisions). What differs is the ``Host`` port; the steps
below are the same for both, so the two cannot drift. No Temporal, no I/O of its own:
everything the world answers comes through the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict
from tower.contract.failures import TowerError, brief, failure_reason
from tower.core.context import NodeContext
from tower.core.engine import Transition, advance, fail, node_error
from tower.core.events import Event, apply_event
from tower.core.gates import (
    Gate,
    canonical_time,
    close_gate,
    needs_gate,
    open_gate,
    pending_record,
)
from tower.core.graph import FAILED, Machine
from tower.core.state import AgentState, Message, UpdateError, Usage, apply_update

# An event as it reaches the loop: (what was sent, where from, the calls that made it).
Arrival = tuple[Any, str, list[str]]


class Host(Protocol):
    """What running a machine needs from where it runs."""

    @property
    def machine(self) -> Machine: ...

    @property
    def node_failures(self) -> tuple[type[BaseException], ...]:
        """What a node raising means "this node failed" (a worker adds its activities')."""

    @property
    def current(self) -> AgentState: ...  # the run's state now

    def now(self) -> datetime: ...  # the run's clock

    def event_id(self) -> int: ...  # where in its history the run is (the log's map to it)

    def record(self, state: AgentState, transition: Transition) -> None:
        """Take ``state`` as the run's, log ``transition``, publish what readers see."""

    def context(self, node: str, *, visit: bool = False) -> NodeContext:
        """The world ``node`` reaches for this step; ``visit``: the node's own visit, with
        what the run authorizes its side effects to do (not a re-check, an entry action)."""


class NodeHost(Host, Protocol):
    """A host of a node-driven machine: it holds runs at their gates."""

    async def opening(self, gate: Gate) -> tuple[str, str | None, timedelta]:
        """For a request of ``gate`` about to open: the run id decisions must name, and the
        tenant's role and shortest review window for it (None, 0: the gate's own)."""

    async def decision(self, gate: Gate, pending: GateRecord, *, resume: bool) -> Decision | None:
        """Wait for a decision on ``pending`` (``resume``: a request a carried-over run left
        open). None: none came by its expiry, or the host stopped waiting before it."""

    def closed(self) -> None: ...  # the request ``decision`` answered is closed


class EventHost(Host, Protocol):
    """A host of an event-driven machine."""

    @property
    def EventModel(self) -> type[BaseModel]: ...  # noqa: N802 (a model with ``step: int``)

    def on_event(self, state: AgentState, event: Any) -> Mapping[str, Any]:
        """What an accepted event changes in the state (before the guards look)."""

    async def next_event(self, action: Arrival | None) -> Arrival:
        """The next event to apply, ``action`` (the entry action's) in its place in line."""

    def reject(self, raw: Any, source: str, why: str) -> None:
        """An event that changes nothing: keep it, and why, in the audit trail."""


# --- node-driven machines -------------------------------------------------------------------


@dataclass(frozen=True)
class Hold:
    """Open ``gate`` (with the node's ``update``, for a gate after it), or go on waiting on
    the request a run continued-as-new left open (``resume``)."""

    gate: Gate
    update: Mapping[str, Any] | None = None
    calls: list[str] = field(default_factory=list)
    resume: bool = False


@dataclass(frozen=True)
class Close:
    """End the pending request with ``status`` and move to ``target``."""

    status: GateStatus
    target: str
    decision: Decision | None = None
    why: str = ""
    update: Mapping[str, Any] | None = None


async def node_step(host: NodeHost) -> None:
    """One step of a run standing on a (non-terminal) node: hold at its gate, or run it and
    take the move its route picks (or hold at a gate after it)."""
    machine, state = host.machine, host.current
    held = gate_before(machine, state)
    if held is not None:
        await hold(host, held)
        return
    node = machine.nodes[state.node]
    ctx = host.context(node.name, visit=True)
    try:
        update = dict(await node.fn(ctx, state))
    except host.node_failures as exc:
        # A failed node's model calls were still paid for.
        spent = apply_update(state, _spent(node.name, ctx))
        host.record(*node_error(machine, spent, node.name, failure_reason(exc),
                                at=host.now(), event_id=host.event_id(), calls=ctx.calls))
        return
    update.update(_spent(node.name, ctx))
    gate = machine.gates.get(node.name)
    if gate is not None and gate.when == "after" and _needs_after(state, gate, update):
        await hold(host, Hold(gate, update, ctx.calls))
        return
    host.record(*advance(machine, state, node.name, update, at=host.now(),
                         event_id=host.event_id(), calls=ctx.calls))


def gate_before(machine: Machine, state: AgentState) -> Hold | None:
    """The hold a run standing on its node takes before the node runs, if any."""
    gate = machine.gates.get(state.node)
    if gate is None:
        return None
    pending = pending_record(state)
    if pending is not None and pending.gate == gate.name:
        return Hold(gate, resume=True)
    if gate.when == "before" and needs_gate(state, gate):
        return Hold(gate)
    return None


async def hold(host: NodeHost, step: Hold) -> None:
    """Open the gate (or take up the request a carried-over run left open), wait for its
    decision, then close it: approved (re-checked first, if the gate says so), rejected or
    expired. Returns with the request still open when the host stopped waiting."""
    machine, gate = host.machine, step.gate
    if not step.resume:
        run_id, role, min_review = await host.opening(gate)
        host.record(*open_gate(machine, host.current, gate, at=host.now(),
                               event_id=host.event_id(), run_id=run_id, update=step.update,
                               calls=step.calls, role=role, min_review=min_review))
    pending = pending_record(host.current)
    if pending is None:  # the update could not be applied: the run failed instead
        return
    decision = await host.decision(gate, pending, resume=step.resume)
    if decision is None and host.now() < pending.expires_at:
        return  # still open: the host carries the run over, or a test stops here
    try:
        ending, calls = await _ending(host, gate, pending, decision)
        host.record(*close_gate(machine, host.current, gate, ending.status,
                                target=ending.target, at=host.now(),
                                event_id=host.event_id(), decision=ending.decision,
                                why=ending.why, update=ending.update, calls=calls))
        if ending.status == GateStatus.APPROVED and gate.when == "after" and (
                host.current.node == gate.node):
            # A gate after its node: once approved, the node's move is taken at once.
            host.record(*advance(machine, host.current, gate.node, {}, at=host.now(),
                                 event_id=host.event_id()))
    finally:
        host.closed()


async def _ending(host: Host, gate: Gate, pending: GateRecord, decision: Decision | None
                  ) -> tuple[Close, list[str] | None]:
    """How a request ends — no decision by its expiry, a rejection, or an approval (after
    the gate's re-check of the world, if it has one) — and the calls a re-check made."""
    if decision is None:
        return Close(GateStatus.EXPIRED, gate.on_timeout,
                     why=f"no decision by {canonical_time(pending.expires_at)}"), None
    if decision.decision == Verdict.REJECT:
        return Close(GateStatus.REJECTED, gate.on_reject, decision), None
    approved = Close(GateStatus.APPROVED, gate.node, decision, update=decision.edits)
    if gate.recheck is None:
        return approved, None
    ctx = host.context(gate.node)
    try:
        stale = await gate.recheck(ctx, apply_update(host.current, decision.edits))
    except host.node_failures as exc:
        why = f"re-check failed: {exc}"
        return Close(GateStatus.APPROVED, FAILED, decision, why, {"errors": [why]}), ctx.calls
    if stale:
        assert gate.on_stale is not None
        note = Message(role="system", content="The approved action was not carried out "
                       f"because the world changed: {stale}. Plan again.")
        return Close(GateStatus.STALE, gate.on_stale, decision, stale,
                     {"messages": [note]}), ctx.calls
    return approved, ctx.calls


def _needs_after(state: AgentState, gate: Gate, update: Mapping[str, Any]) -> bool:
    try:
        return needs_gate(apply_update(state, update), gate)
    except UpdateError:
        return False  # advance() fails the run with the reason


def _spent(node: str, ctx: NodeContext) -> dict[str, Any]:
    if not ctx.usage.calls:
        return {}
    return {"usage": ctx.usage, "node_usage": {node: ctx.usage}}


# --- event-driven machines ------------------------------------------------------------------


@dataclass
class Ledger:
    """What an event-driven run keeps beside its state: the steps whose entry action has
    run, the events accepted (a duplicate never moves the run twice) and the model usage of
    entry actions, merged into the next accepted event."""

    entered: set[int] = field(default_factory=set)
    accepted: set[str] = field(default_factory=set)
    usage: Usage = field(default_factory=Usage)


async def event_step(host: EventHost, ledger: Ledger) -> None:
    """Enter the state (its entry action runs once, and may make an event), then take the
    next event through the guards."""
    machine, state = host.machine, host.current
    action: Arrival | None = None
    if state.step not in ledger.entered:
        ledger.entered.add(state.step)
        ctx = host.context(state.node)
        try:
            data = await machine.nodes[state.node].fn(ctx, state)
        except host.node_failures as exc:
            host.record(*fail(machine, state, failure_reason(exc), at=host.now(),
                              event_id=host.event_id(), calls=ctx.calls))
            return
        ledger.usage = ledger.usage + ctx.usage
        if data is not None:
            action = ({**data, "step": state.step}, f"action:{state.node}", ctx.calls)
    take_event(host, ledger, *await host.next_event(action))


def take_event(host: EventHost, ledger: Ledger, raw: Any, source: str, calls: list[str]
               ) -> None:
    """Apply one event: validated by the agent's model, merged by its ``on_event``, moved
    by the guards; or refused (``host.reject``) with nothing changed."""
    state = host.current
    try:
        parsed = host.EventModel.model_validate(raw)
        data = parsed.model_dump(mode="json", exclude={"step"}, exclude_defaults=True)
        event = Event(step=parsed.step, data=data, source=source)  # type: ignore[attr-defined]
        update = dict(host.on_event(state, parsed))
        if ledger.usage.calls:
            update["usage"] = ledger.usage
        moved = apply_event(host.machine, state, event, update, accepted=ledger.accepted,
                            at=host.now(), event_id=host.event_id(), calls=calls)
    except ValidationError as exc:
        host.reject(raw, source, f"invalid event: {brief(exc)}")
        return
    except TowerError as exc:
        host.reject(raw, source, str(exc))
        return
    ledger.accepted.add(event.key)
    ledger.usage = Usage()
    host.record(*moved)
