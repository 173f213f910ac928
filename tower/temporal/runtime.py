"""Run a Machine inside a Temporal workflow.

Each agent subclasses ``AgentWorkflow`` with its own ``@workflow.defn(name=...)``
and ``@workflow.run``; the loop, the queries, the search attributes and the Web
UI's current details live here once. The loop is the checkpoint: every model
and tool call inside a node is an activity, so its result is in the history and
a new worker resumes from there.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, ClassVar, cast

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract import search
from tower.contract.wire import AbortRequest, RetryRequest
from tower.core.approval import pending_record
from tower.core.carry import Carry, LogSummary, summarize
from tower.core.cost import CallUsage, cost_report
from tower.core.details import render_details
from tower.core.engine import (
    Transition,
    advance,
    check_operator_retry,
    node_error,
    operator_abort,
    operator_retry,
    start,
)
from tower.core.errors import IllegalTransition, NodeFailed
from tower.core.gates import approving_decision, needs_gate
from tower.core.graph import DONE, FAILED, TERMINALS, Machine
from tower.core.legacy_trust import ApprovalSettings
from tower.core.state import AgentState, S, UpdateError, apply_update, set_engine_fields
from tower.temporal import tracing
from tower.temporal.context import NodeContext
from tower.temporal.gating import Gatekeeper

# Memo key a starter may set to override ``failed_wait`` for one run (seconds; 0: close
# at once). A memo is part of the run's history, so replay sees the same value.
FAILED_WAIT_MEMO = "tower_failed_wait_seconds"
# Runs recorded before FAILED runs waited for an operator closed at once: they replay
# down the old path (no marker in their history), new runs take the new one.
DEAD_LETTER_PATCH = "tower-dead-letter"
# Runs recorded before a pending gate was published in the memo replay without it.
PENDING_MEMO_PATCH = "tower-pending-memo"
# Runs recorded before the pending gate's role was a search attribute replay without it.
GATE_ROLE_PATCH = "tower-gate-role"


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
    # How long a FAILED run stays open for an operator's retry or abort (dead letter).
    failed_wait: ClassVar[timedelta] = timedelta(days=7)

    def __init__(self) -> None:
        self._state: AgentState | None = None
        self._log: list[Transition] = []
        self._carried: LogSummary | None = None
        # The state after every step, kept only when a replay inspector asks for it
        # (starter/histories.py sets it to []): a live run stays at one state in memory.
        self.trace: list[AgentState] | None = None
        self._init_gates()
        self._calls: list[CallUsage] = []
        self._decision: RetryRequest | AbortRequest | None = None
        self._closing = False
        self._pending_memo: dict[str, Any] | None = None

    async def drive(
        self, state: S, *, carried: LogSummary | None = None,
        approvals: ApprovalSettings | None = None,
    ) -> S:
        """Run the machine from its entry node until DONE, or FAILED with no operator retry.

        With ``carried`` (a run continued-as-new), ``state`` already stands on its node:
        the run goes on from there, with no new START transition. ``approvals`` is the
        HMAC setting of runs started before signed decisions (agents call ``admit``).
        """
        if approvals is not None:
            self._use_approval_settings(approvals)
        if self._trust is not None and self._trust.policy.unsigned_allowed:
            state = set_engine_fields(state, unsigned_decisions=True)
        if carried is None:
            self._record(*start(self.machine, state, at=workflow.now(), event_id=_event_id()))
        elif workflow.info().continued_run_id is None:
            # A carried state is the run's own, handed over by continue-as-new; from a
            # client's start it would be a forged state (approvals, steps, anything).
            raise ApplicationError("a carried state is accepted only from the run's own "
                                   "continue-as-new, not in a new run's input",
                                   type="InputRefused", non_retryable=True)
        else:
            self._state, self._carried = state, carried
            self.publish()
        while True:
            while self.current.node not in TERMINALS:
                if self.carry_over_due() and workflow.all_handlers_finished():
                    self.carry_over()
                await self._step()
            if self.current.node == DONE or not await self._await_operator():
                self._closing = True
                break
        # A decision handler may still be reporting its outcome: let it answer first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        # The engine hands back the state type it is given: the run ends in the agent's own.
        return cast(S, self.current)

    async def _await_operator(self) -> bool:
        """Hold a FAILED run open until an operator decides or ``failed_wait`` passes.
        True when the run goes on (a retry), False when it closes."""
        if not workflow.patched(DEAD_LETTER_PATCH):
            return False
        wait = self._failed_wait()
        if wait > timedelta(0):
            until = workflow.now() + wait
            workflow.set_current_details(
                f"**{self.machine.name}** · FAILED · waiting for an operator until "
                f"{until:%Y-%m-%d %H:%M} UTC: `tower retry {workflow.info().workflow_id} "
                f"--from NODE` or `tower abort {workflow.info().workflow_id}`")
            with contextlib.suppress(TimeoutError):  # no decision in time: the run closes
                await workflow.wait_condition(lambda: self._decision is not None, timeout=wait)
        decision, self._decision = self._decision, None
        at, event_id = workflow.now(), _event_id()
        if isinstance(decision, RetryRequest):
            self._record(*operator_retry(self.machine, self.current, decision.node, decision.by,
                                         at=at, event_id=event_id))
            return True
        if isinstance(decision, AbortRequest):
            self._record(*operator_abort(self.machine, self.current, decision.by,
                                         decision.reason, at=at, event_id=event_id))
        return False

    def _failed_wait(self) -> timedelta:
        seconds = workflow.memo_value(FAILED_WAIT_MEMO, None, type_hint=float)
        if seconds is None:
            return self.failed_wait
        return timedelta(seconds=max(0.0, seconds))

    @workflow.update(name="retry")
    def retry(self, request: RetryRequest) -> str:
        """Operator: take this FAILED run back to ``request.node``."""
        self._decision = request
        return f"{workflow.info().workflow_id} will retry from {request.node}"

    @retry.validator
    def _check_retry(self, request: RetryRequest) -> None:
        # Refused here, a bad decision never enters the history and changes nothing.
        self._check_can_decide()
        check_operator_retry(self.machine, self.current, request.node)

    @workflow.update(name="abort")
    def abort(self, request: AbortRequest) -> str:
        """Operator: close this FAILED run for good."""
        self._decision = request
        return f"{workflow.info().workflow_id} aborted"

    @abort.validator
    def _check_abort(self, request: AbortRequest) -> None:
        self._check_can_decide()

    def _check_can_decide(self) -> None:
        state = self._state
        if state is None or state.node != FAILED or self._closing:
            where = "closing" if self._closing else (state.node if state else "STARTING")
            raise IllegalTransition(where, "?", "only a FAILED run waiting for an operator "
                                                "takes a retry or an abort")
        if self._decision is not None:
            raise IllegalTransition(FAILED, "?", "a decision is already pending")

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
        wanted: list[tuple[Any, Any]] = [
                  (search.AGENT_NAME, self.machine.name), (search.AGENT_NODE, state.node),
                  (search.AGENT_STATUS, state.status.value), (search.AGENT_STEP, state.step),
                  (search.AGENT_COST_USD, state.usage.cost_usd),
                  (search.AGENT_TOKENS, state.usage.tokens)]
        if state.errors and workflow.patched(DEAD_LETTER_PATCH):  # why it failed, searchable
            wanted.append((search.AGENT_ERROR, state.errors[-1][:256]))
        pending = pending_record(state)
        # Gated agents only: a run with no gate gets no marker and no attribute.
        if self.machine.gates and workflow.patched(GATE_ROLE_PATCH):
            wanted.append((search.AGENT_GATE_ROLE, pending.role if pending else ""))
        have = workflow.info().typed_search_attributes
        changed = [key.value_set(value) for key, value in wanted if have.get(key) != value]
        if changed:
            workflow.upsert_search_attributes(changed)
        # A run waiting at a gate shows the request in its memo (None removes it once
        # decided), so `tower pending` needs no worker; a run with no gate is untouched.
        memo = search.pending_memo(pending)
        if memo != self._pending_memo and workflow.patched(PENDING_MEMO_PATCH):
            workflow.upsert_memo({search.PENDING_MEMO: memo})
            self._pending_memo = memo

    async def _step(self) -> None:
        before, seen = self.current, len(self._log)
        with tracing.state_span(self.machine.name, before) as span:
            await self._run_node()
            tracing.close_state(span, before, self.current, self._log[seen:])

    async def _run_node(self) -> None:
        state = self.current
        gate = self.machine.gates.get(state.node)
        pending = pending_record(state)
        if gate is not None and pending is not None and pending.gate == gate.name:
            await self.hold(gate, resume=True)  # continued-as-new while it waited
            return
        if gate is not None and gate.when == "before" and needs_gate(state, gate):
            await self.hold(gate)
            return
        node = self.machine.nodes[state.node]
        ctx = NodeContext(self.machine.name, node, state.step, list(self.models),
                          decision=approving_decision(state, node.name))
        try:
            update = dict(await node.fn(ctx, state))
        except (NodeFailed, ActivityError) as exc:
            # A failed node's model calls were still paid for.
            self._calls += ctx.model_calls
            state = apply_update(state, _spent(node.name, ctx))
            self._record(*node_error(self.machine, state, node.name, _reason(exc),
                                     at=workflow.now(), event_id=_event_id(), calls=ctx.calls))
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
