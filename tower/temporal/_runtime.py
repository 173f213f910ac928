"""The two kinds of agent workflow; the loop, transition log, queries, search attributes
and the Web UI's current details are ``MachineRun``'s (tower/temporal/_machine_run.py).

``AgentWorkflow``, node-driven: a step runs the current node (behind its gate, if one
applies: ``GateRuntime``) and takes the move its route picks (tower/core/interpreter.py
``node_step``). A span for each state a run passes through: only the OpenTelemetry API, a
no-op without a provider; with Temporal's replay-safe one (telemetry.py) a replay exports
nothing.

``EventWorkflow``, event-driven (docs/machines.md): a step enters the state, waits for an
event and applies it through the guards (``event_step``). Events from the entry action, the
run's input and the ``event`` signal go through one inbox, in arrival order; a refused one
is kept in the audit trail (queries ``rejected`` and ``rejected_total``), never silently
dropped. Signals are taken raw, as a gated run takes them (_gate.py). Events from outside
pick the next move, so they are signed by a roster member whose ``events`` name this agent
(docs/approvals.md), unless the agent sets ``trusted_events``; the ``send_event`` update's
validator refuses a bad one before it enters the history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar, cast

from opentelemetry import context, trace
from opentelemetry.trace import Span, Status, StatusCode
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json, to_jsonable_python
from temporalio import workflow
from temporalio.common import RawValue

from tower.contract import names
from tower.contract.decisions import Decision, GateRecord
from tower.contract.failures import brief, failure
from tower.contract.pending import PendingView
from tower.core.engine import Transition
from tower.core.events import EventRejected, Rejection
from tower.core.gates import Gate, Outcome
from tower.core.graph import TERMINALS
from tower.core.interpreter import Arrival, Ledger, event_step, node_step
from tower.core.signing import SignatureRefused, verify_event
from tower.core.state import AgentState, S, set_engine_fields
from tower.temporal._gate import GateRuntime
from tower.temporal._machine_run import MachineRun
from tower.temporal._task_time import TaskBudget
from tower.temporal.payloads import UnopenablePayload


class AgentWorkflow(MachineRun):
    """Base of node-driven agents: the loop's node steps and approval gates
    (``GateRuntime``, whose handlers these are). A run that fails is a failed workflow
    execution, recovered by ``tower retry`` (a Temporal reset)."""

    # Continue-as-new while parked at a gate when Temporal suggests it or the run has taken
    # CARRY_AFTER_SIGNALS signals (a flood): the agent's ``carry_input`` must rebuild the run
    # from a Carry.
    carry_while_parked: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._gate = GateRuntime(self)
        # Asked once a run (in the sandbox, an environment lookup): a provider is installed
        # with the worker (telemetry.py), before its runs; without one, no span at all.
        self._traced = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)

    @workflow.update(name=names.DECIDE.name)
    async def decide(self, raw: dict[str, Any]) -> Outcome:
        return await self._gate.decide(raw)

    @decide.validator
    def _validate_decide(self, raw: dict[str, Any]) -> None:
        self._gate.validate(raw)

    @workflow.signal(dynamic=True)
    def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal, taken raw: a decision, ``refresh_trust``, or refused (_gate.py)."""
        self._gate.take(name, args)

    @workflow.query(name=names.APPROVALS.name)
    def query_approvals(self) -> dict[str, Any]:
        return self._gate.approvals()

    async def drive(self, state: S) -> S:
        """Run the machine until DONE (its final state) or FAILED (the workflow execution
        fails with ``AgentFailed``); a continued run goes on from its carried state."""
        trust = self.trust.snapshot
        if trust is not None and trust.policy.unsigned_allowed:
            state = set_engine_fields(state, unsigned_decisions=True)
        # The engine hands back the state type it is given: the run ends in the agent's own.
        return cast(S, await self.run_machine(state))

    async def run_from(self, state: AgentState, request: Any) -> AgentState:
        return await self.drive(state)

    def carry_over_due(self) -> bool:
        # A gate that returned to carry over after a flood of signals is due.
        return super().carry_over_due() or self._gate.flooded()

    def request_shown(self, state: AgentState) -> tuple[bool, PendingView | None]:
        return self._gate.request_shown(state)

    async def step(self) -> None:
        if not self._traced:
            await node_step(self)
            return
        before, seen = self.current, len(self._log)
        with state_span(self.machine.name, before) as span:
            await node_step(self)
            close_state(span, before, self.current, self._log[seen:])

    async def settle(self) -> None:
        # A decision handler may still be reporting its outcome: let it answer first.
        await workflow.wait_condition(workflow.all_handlers_finished)

    async def opening(self, gate: Gate) -> tuple[str, str | None, timedelta]:
        return await self._gate.opening(gate)

    async def decision(self, gate: Gate, pending: GateRecord, *, resume: bool
                       ) -> Decision | None:
        return await self._gate.wait(gate, pending, resume=resume)

    def closed(self) -> None:
        self._gate.closed()

EVENTS_PER_TASK = 50  # signalled events taken into the inbox per workflow task
REJECTED_KEEP = 100  # refused events kept in memory (and in the ``rejected`` query)
KEEP_EVENT_BYTES = 16 * 1024  # a refused event larger than this is kept by its size only
UNTAKEN = (f"refused unread: more than {EVENTS_PER_TASK} events arrived in one workflow "
           "task (a flood?); send it again, as the send_event update")


class EventWorkflow(MachineRun):
    """Base of event-driven agents. Subclasses set ``Input`` and ``EventModel`` (a pydantic
    model with a ``step: int`` field), are decorated ``@agent(GRAPH)`` and may override
    ``on_event``."""

    EventModel: ClassVar[type[BaseModel]]
    # True: events from outside are trusted-internal and need no signature: anyone who can
    # signal the run can move it (only for workers on a private task queue).
    trusted_events: ClassVar[bool] = False
    # The roster says who may send events: every run is admitted; none carries over.
    admits: ClassVar[bool | None] = True
    carries_over: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self._inbox: list[Arrival] = []  # (raw event, source, calls)
        self._ledger = Ledger()  # entered steps, accepted events, entry actions' usage
        self._rejected: deque[Rejection] = deque(maxlen=REJECTED_KEEP)
        self._rejected_total = 0
        self._event_budget = TaskBudget(EVENTS_PER_TASK)  # signalled events per task

    def on_event(self, state: AgentState, event: Any) -> Mapping[str, Any]:
        """What an accepted event changes in the state (before the guards look)."""
        return {}

    def initial_events(self, request: Any) -> list[dict[str, Any]]:
        """The events a run starts with (none unless the agent says so)."""
        return []

    async def run_from(self, state: AgentState, request: Any) -> AgentState:
        return await self.drive_events(state, initial=self.initial_events(request))

    async def drive_events(
        self, state: S, *, initial: Iterable[Mapping[str, Any]] = ()
    ) -> S:
        """Run until DONE or FAILED, applying events one at a time."""
        self._inbox += [(dict(raw), "input", []) for raw in initial]
        return cast(S, await self.run_machine(state))

    async def step(self) -> None:
        await event_step(self, self._ledger)

    async def settle(self) -> None:
        for raw, source, _ in self._inbox:  # arrived too late: refused, and said so
            self.reject(raw, source, f"the run is {self.current.node}")
        self._inbox.clear()

    async def next_event(self, action: Arrival | None) -> Arrival:
        """The next event in arrival order (the entry action's joins the line), opened: one
        from outside that is not signed as it must be is refused, and the next one taken."""
        if action is not None:
            self._inbox.append(action)
        while True:
            await workflow.wait_condition(lambda: bool(self._inbox))
            raw, source, calls = self._inbox.pop(0)
            opened, why = self._open(raw, source)
            if opened is not None:
                return opened, source, calls
            self.reject(raw, source, why)

    @workflow.signal(dynamic=True)
    def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal, taken raw: ``event`` joins the inbox (validated when applied, in
        order); anything else, or an event past this task's budget, is refused now."""
        if name != names.EVENT.name:
            self._refuse(f"unknown signal {name[:80]!r}: nothing changed")
        elif not self._event_budget.take():
            self._refuse(UNTAKEN)
        elif len(args) != 1:
            self._refuse(f"malformed event: an event signal carries one input, this one "
                         f"carried {len(args)}")
        else:
            try:
                raw = workflow.payload_converter().from_payload(args[0].payload)
            except UnopenablePayload as exc:
                self._refuse(f"malformed event: {exc}")
            except Exception:  # whatever the converter raises on input a sender chose
                self._refuse("malformed event: the signal's input cannot be decoded")
            else:
                self._inbox.append((raw, "signal", []))

    @workflow.update(name=names.SEND_EVENT.name)
    def send_event(self, raw: Any = None) -> str:
        """An event as an update: refused by the validator before it enters the history."""
        self._inbox.append((raw, "signal", []))
        return "accepted: applied in arrival order"

    @send_event.validator
    def _check_event(self, raw: Any = None) -> None:
        if self._state is None or self.current.node in TERMINALS:
            raise failure(EventRejected("the run is not waiting for events"))
        opened, why = self._open(raw, "signal")
        if opened is None:
            raise failure(EventRejected(why))
        try:
            parsed = self.EventModel.model_validate(opened)
        except ValidationError as exc:
            raise failure(EventRejected(f"invalid event: {brief(exc)}")) from None
        step = getattr(parsed, "step", None)
        if step != self.current.step:
            raise failure(EventRejected(
                f"event for step {step}, but the run is at step {self.current.step}"))

    def _open(self, raw: Any, source: str) -> tuple[Any, str]:
        """The event inside a signed message from outside, or why there is none. Events
        from the run's own input and entry actions, and trusted-internal agents' events,
        pass as they are."""
        if source != "signal" or self.trusted_events:
            return raw, ""
        trust = self.trust.snapshot
        if trust is None:  # the agent never called ``admit``: no roster, no sender
            return None, "events from outside are refused: this run has no roster (admit)"
        token = raw.get("token") if isinstance(raw, dict) and len(raw) == 1 else None
        if not isinstance(token, str):
            return None, "unsigned event refused: events from outside must be signed"
        try:
            claims, member, _ = verify_event(token, trust.roster,
                                             now=workflow.now().timestamp())
        except SignatureRefused as exc:
            return None, str(exc)
        if self.machine.name not in member.events or claims.sub != member.name:
            return None, f"{member.name} may not send {self.machine.name} events"
        if (claims.tenant, claims.run, claims.agent) != (
                trust.roster.tenant, workflow.info().workflow_id, self.machine.name):
            return None, (f"event is for {claims.tenant}/{claims.run} ({claims.agent}), "
                          "not this run")
        return claims.event, ""

    @workflow.query(name=names.REJECTED.name)
    def query_rejected(self) -> list[Rejection]:
        """The newest REJECTED_KEEP refused events."""
        return list(self._rejected)

    @workflow.query(name=names.REJECTED_TOTAL.name)
    def query_rejected_total(self) -> int:
        return self._rejected_total

    def reject(self, raw: Any, source: str, reason: str) -> None:
        size = len(to_json(raw, fallback=repr))
        event = (to_jsonable_python(raw, fallback=repr) if size <= KEEP_EVENT_BYTES
                 else f"({size} bytes, not kept)")
        self._refuse(reason, source, event)
        workflow.logger.warning("event refused at step %s (%s): %s", self.current.step,
                                source, reason)

    def _refuse(self, reason: str, source: str = "signal", event: Any = None) -> None:
        """Keep a refusal in the audit trail. A signal refused as it arrives (perhaps before
        the run has started) keeps no input: it is in the history."""
        state = self._state
        self._rejected_total += 1
        self._rejected.append(Rejection(
            step=state.step if state else 0, node=state.node if state else "STARTING",
            source=source, reason=reason, at=workflow.now(), event=event))


# The API's tracer: it follows the provider installed later too, so one serves every run.
_tracer = trace.get_tracer("tower.agent")


@contextmanager
def state_span(agent: str, state: AgentState) -> Iterator[Span]:
    """Open the span of the state ``state`` stands on; model and tool spans nest in it
    (opened only with a tracer provider installed: ``AgentWorkflow.step``)."""
    span = _tracer.start_span(f"state {state.node}", attributes={
        "tower.agent": agent, "tower.node": state.node, "tower.step": state.step,
    })
    token = context.attach(trace.set_span_in_context(span))
    # A GeneratorExit (no Exception) leaves the span open: the worker evicted the run
    # mid-state and its coroutine is being closed, often in another context (garbage
    # collection), where the token cannot be detached. The state is not over either:
    # replaying the run reopens it.
    try:
        yield span
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()
        context.detach(token)
        raise
    span.end()
    context.detach(token)


def close_state(span: Span, before: AgentState, after: AgentState,
                moves: list[Transition]) -> None:
    """Record where the state led and what it spent on models."""
    if not moves or not span.is_recording():
        # Still parked (a gate): the span ends without a move. Not recording (no provider
        # installed): the attributes would be dropped, so they are not computed.
        return
    last = moves[-1]
    models = sorted({c.split(":", 1)[1] for t in moves for c in t.calls if c.startswith("model:")})
    tools = [c.split(":", 1)[1] for t in moves for c in t.calls if c.startswith("tool:")]
    prompt = after.usage.prompt_tokens - before.usage.prompt_tokens
    completion = after.usage.completion_tokens - before.usage.completion_tokens
    span.set_attributes({
        "tower.from": last.source, "tower.to": last.target, "tower.reason": last.reason,
        "tower.to_step": last.step, "tower.models": models, "tower.tools": tools,
        "tower.prompt_tokens": prompt, "tower.completion_tokens": completion,
        "tower.tokens": prompt + completion,
        "tower.cost_usd": round(after.usage.cost_usd - before.usage.cost_usd, 8),
        "tower.status": after.status.value,
    })
    if after.node == "FAILED":
        span.set_status(Status(StatusCode.ERROR, last.reason))
