"""Event-driven machines on Temporal: ``EventWorkflow``.

The loop, transition log, queries, search attributes and details are ``MachineRun``'s; a
step enters the state, waits for an event and applies it through the guards
(tower/core/interpreter.py ``event_step``, the same in-process). The class carries only the
handlers it can honour (no operator retry/abort, no approval gates). Each state's node
function is its *entry action*:
it runs once when the state is entered (model and tool calls are activities, so the
history holds their results) and returns the data of an event, or None to wait for
one from outside. Events from the entry action, from the run's input and from the
``event`` signal all go through one inbox, in arrival order, and through the same
validation, duplicate check and guards. A refused event is kept in the audit trail
(query ``rejected``: the newest 100; ``rejected_total`` counts them all) with the reason;
nothing is ever silently dropped.

Signals are taken raw, as a gated run takes them (tower/temporal/_refusals.py): anyone may send
any signal with any inputs, thousands at a time. A malformed ``event`` signal or one of another
name is refused into the audit trail, not dropped by the SDK or failing the workflow task; at
most ``EVENTS_PER_TASK`` signalled events enter the inbox per workflow task (each is verified
when applied), the rest of a flood are refused as they arrive, each costing a counter and a
small record.

Events from outside carry authority (they pick the next move), so they are signed: a
JWS (``tower-event+jwt``, docs/approvals.md) by a roster member whose ``events`` name this
agent, bound to this tenant, run and agent. The ``send_event`` update's validator refuses
a bad one before it enters the history; the ``event`` signal checks it when applied. An
agent that sets ``trusted_events = True`` declares its events trusted-internal instead:
anyone who can signal the run can move it (only for workers on a private task queue).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json, to_jsonable_python
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from tower.contract import names
from tower.contract.failures import brief, failure
from tower.core.events import EventRejected, Rejection
from tower.core.graph import TERMINALS
from tower.core.interpreter import Arrival, Ledger, event_step
from tower.core.signing import SignatureRefused, verify_event
from tower.core.state import AgentState, S
from tower.temporal._machine_run import MachineRun
from tower.temporal._refusals import TaskBudget
from tower.temporal._unopenable import UnopenablePayload

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
    # True: events from outside are trusted-internal and need no signature (see above).
    trusted_events: ClassVar[bool] = False
    # The roster says who may send events: every run is admitted; none carries over.
    admits: ClassVar[bool | None] = True
    carries_state: ClassVar[bool] = False
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
                return
            except Exception:  # whatever the converter raises on input a sender chose
                self._refuse("malformed event: the signal's input cannot be decoded")
                return
            self._inbox.append((raw, "signal", []))

    @workflow.update(name=names.SEND_EVENT.name)
    def send_event(self, raw: Any = None) -> str:
        """An event as an update: refused by the validator before it enters the history."""
        self._inbox.append((raw, "signal", []))
        return "accepted: applied in arrival order"

    @send_event.validator
    def _check_event(self, raw: Any = None) -> None:
        if self._state is None or self.current.node in TERMINALS:
            raise refused("the run is not waiting for events")
        opened, why = self._open(raw, "signal")
        if opened is None:
            raise refused(why)
        try:
            parsed = self.EventModel.model_validate(opened)
        except ValidationError as exc:
            raise refused(f"invalid event: {brief(exc)}") from None
        step = getattr(parsed, "step", None)
        if step != self.current.step:
            raise refused(f"event for step {step}, but the run is at step {self.current.step}")

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
        self._keep(Rejection(step=self.current.step, node=self.current.node, source=source,
                             reason=reason, at=workflow.now(), event=event))
        workflow.logger.warning("event refused at step %s (%s): %s", self.current.step,
                                source, reason)

    def _refuse(self, reason: str) -> None:
        """A signal refused as it arrives (perhaps before the run has started): its input is
        in the history, not in the audit trail."""
        state = self._state
        self._keep(Rejection(step=state.step if state else 0,
                             node=state.node if state else "STARTING", source="signal",
                             reason=reason, at=workflow.now(), event=None))

    def _keep(self, rejection: Rejection) -> None:
        self._rejected_total += 1
        self._rejected.append(rejection)


def refused(why: str) -> ApplicationError:
    """The ``send_event`` validator's refusal: the sender reads why; nothing changed."""
    return failure(EventRejected(why))
