"""Run a Machine inside a Temporal workflow.

Each agent subclasses ``AgentWorkflow`` with its own ``@workflow.defn(name=...)``
and ``@workflow.run``; the loop, the queries, the search attributes and the Web
UI's current details live here once. The loop is the checkpoint: every model
and tool call inside a node is an activity, so its result is in the history and
a new worker resumes from there.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from . import search, tracing
from .approval import ApprovalSettings
from .carry import Carry, LogSummary, summarize
from .context import NodeContext
from .cost import CallUsage, cost_report
from .details import render_details
from .engine import Transition, advance, fail, start
from .errors import NodeFailed
from .gates import needs_gate
from .gating import Gatekeeper
from .graph import TERMINALS, Machine
from .state import AgentState, UpdateError, apply_update


class AgentWorkflow(Gatekeeper):
    """Base of every agent workflow. Subclasses set ``machine`` and ``Input``."""

    machine: ClassVar[Machine]
    Input: ClassVar[type[BaseModel]]
    # Ordered model fallbacks for this agent; empty means the worker's list.
    models: ClassVar[list[str]] = []
    # Continue-as-new once the history has this many events, even before Temporal
    # suggests it (None: only when suggested). Only agents with ``carry_input`` do.
    continue_as_new_after: int | None = None
    # Upsert the search attributes at every transition (one history event each) instead
    # of only when the status changes, the run parks (``publish``) or it ends.
    publish_every_step: ClassVar[bool] = False

    def __init__(self) -> None:
        self._state: AgentState | None = None
        self._log: list[Transition] = []
        self._carried: LogSummary | None = None
        # The state after every step, kept only when a replay inspector asks for it
        # (starter/histories.py sets it to []): a live run stays at one state in memory.
        self.trace: list[AgentState] | None = None
        self._init_gates()
        self._calls: list[CallUsage] = []

    async def drive(
        self, state: AgentState, *, carried: LogSummary | None = None,
        approvals: ApprovalSettings | None = None,
    ) -> AgentState:
        """Run the machine from its entry node until DONE or FAILED.

        With ``carried`` (a run continued-as-new), ``state`` already stands on its node:
        the run goes on from there, with no new START transition. ``approvals`` (from
        the run's input) is how an agent with gates verifies decisions.
        """
        self._use_approval_settings(approvals)
        if carried is None:
            self._record(*start(self.machine, state, at=workflow.now(), event_id=_event_id()))
        else:
            self._state, self._carried = state, carried
            self.publish()
        while self.current.node not in TERMINALS:
            if self.carry_over_due() and workflow.all_handlers_finished():
                self.carry_over()
            await self._step()
        # A decision handler may still be reporting its outcome: let it answer first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.current

    def carry_input(self, carry: Carry) -> Any | None:
        """The input of this agent's next run, made from ``carry``; None (the default)
        means this agent does not continue-as-new."""
        return None

    def carry_over_due(self) -> bool:
        info = workflow.info()
        limit = self.continue_as_new_after
        return (info.is_continue_as_new_suggested()
                or (limit is not None and info.get_current_history_length() >= limit))

    def carry(self) -> Carry:
        return Carry(state=self.current.model_dump(mode="json"),
                     log=summarize(self._carried, self._log))

    def carry_over(self) -> None:
        """Continue-as-new with the state and the log summary, if this agent can. Call it
        only once ``workflow.all_handlers_finished()``: a handler cut off loses its reply."""
        args = self.carry_input(self.carry())
        if args is None:
            return None
        self.publish()
        workflow.continue_as_new(args)

    def publish(self) -> None:
        """Bring the run's search attributes up to date; upserts (one history event)
        only the ones that changed. Call it before the run parks on a long wait."""
        state = self.current
        wanted = [(search.AGENT_NAME, self.machine.name), (search.AGENT_NODE, state.node),
                  (search.AGENT_STATUS, state.status.value), (search.AGENT_STEP, state.step),
                  (search.AGENT_COST_USD, state.usage.cost_usd),
                  (search.AGENT_TOKENS, state.usage.tokens)]
        have = workflow.info().typed_search_attributes
        changed = [key.value_set(value) for key, value in wanted if have.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)

    @property
    def current(self) -> AgentState:
        assert self._state is not None, "the run has not started"
        return self._state

    async def _step(self) -> None:
        before, seen = self.current, len(self._log)
        with tracing.state_span(self.machine.name, before) as span:
            await self._run_node()
            tracing.close_state(span, before, self.current, self._log[seen:])

    async def _run_node(self) -> None:
        state = self.current
        gate = self.machine.gates.get(state.node)
        if gate is not None and gate.when == "before" and needs_gate(state, gate):
            await self.hold(gate)
            return
        node = self.machine.nodes[state.node]
        ctx = NodeContext(self.machine.name, node, state.step, list(self.models))
        try:
            update = dict(await node.fn(ctx, state))
        except (NodeFailed, ActivityError) as exc:
            # A failed node's model calls were still paid for.
            self._calls += ctx.model_calls
            state = apply_update(state, _spent(node.name, ctx))
            self._record(*fail(self.machine, state, _reason(exc), at=workflow.now(),
                               event_id=_event_id(), calls=ctx.calls))
            return
        update.update(_spent(node.name, ctx))
        self._calls += ctx.model_calls
        if gate is not None and gate.when == "after" and _gated_after(state, gate, update):
            await self.hold(gate, update, ctx.calls)
            return
        self._record(*advance(self.machine, state, node.name, update, at=workflow.now(),
                              event_id=_event_id(), calls=ctx.calls))

    def _record(self, state: AgentState, transition: Transition) -> None:
        before = self._state
        self._state = state
        self._log.append(transition)
        if self.trace is not None:
            self.trace.append(state)
        # An upsert is a history event: spend it when the status changes or the run
        # ends, not at every step (the live node is in the queries and current details).
        if (self.publish_every_step or before is None or before.status != state.status
                or state.node in TERMINALS):
            self.publish()
        workflow.set_current_details(
            render_details(self.machine, state, transition, workflow.info().workflow_id))

    @workflow.query(name="state")
    def query_state(self) -> dict[str, Any]:
        return self._state.model_dump(mode="json") if self._state else {}

    @workflow.query(name="status")
    def query_status(self) -> str:
        return self._state.status.value if self._state else "STARTING"

    @workflow.query(name="cost")
    def query_cost(self) -> dict[str, Any]:
        """Tokens and estimated dollars: the run's, each node's, each model call's."""
        return cost_report(self._state, self._calls) if self._state else {}

    @workflow.query(name="transitions")
    def query_transitions(self) -> list[Transition]:
        """This run's transitions; earlier runs of a continued thread are in ``log_summary``."""
        return list(self._log)

    @workflow.query(name="log_summary")
    def query_log_summary(self) -> LogSummary:
        return summarize(self._carried, self._log)


def _gated_after(state: AgentState, gate: Any, update: dict[str, Any]) -> bool:
    try:
        return needs_gate(apply_update(state, update), gate)
    except UpdateError:
        return False  # advance() will fail the run with the reason


def _spent(node: str, ctx: NodeContext) -> dict[str, Any]:
    if not ctx.usage.calls:
        return {}
    return {"usage": ctx.usage, "node_usage": {node: ctx.usage}}


def _event_id() -> int:
    return workflow.info().get_current_history_length()


def _reason(exc: BaseException) -> str:
    # An activity's own message is in its cause; "Activity task failed" says nothing.
    while isinstance(exc, ActivityError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, ApplicationError) and exc.type:
        return f"{exc.type}: {exc.message}"
    return str(exc)
