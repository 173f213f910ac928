"""Node-driven machines on Temporal: ``AgentWorkflow`` and its ``NodeDriven`` strategy.

Each agent subclasses ``AgentWorkflow``, decorated ``@agent(GRAPH)``, with its own
``@workflow.run`` calling ``drive``; the loop, the queries, the search attributes and
the Web UI's current details are ``MachineRun``'s. The loop is the checkpoint: every
model and tool call inside a node is an activity, so its result is in the history and
a new worker resumes from there.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any, ClassVar, cast

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from tower.contract.wire import AbortRequest, RetryRequest
from tower.core.carry import Carry
from tower.core.engine import (
    advance,
    check_operator_retry,
    node_error,
    operator_abort,
    operator_retry,
)
from tower.core.errors import IllegalTransition, NodeFailed
from tower.core.gates import approving_decision
from tower.core.graph import DONE, FAILED
from tower.core.interpreter import Hold, after_node, next_step
from tower.core.legacy_trust import ApprovalSettings
from tower.core.state import S, apply_update, set_engine_fields
from tower.temporal import tracing
from tower.temporal.context import TemporalContext
from tower.temporal.gating import Gatekeeper
from tower.temporal.machine_run import DEAD_LETTER_PATCH, MachineRun, carry_refused, event_id
from tower.temporal.outcome import FAILED_IS_FAILURE_PATCH
from tower.temporal.refusals import CARRY_AFTER_SIGNALS

# Memo key that set ``failed_wait`` for one run recorded with the dead-letter wait (seconds;
# 0: close at once). Read only when such a run replays or is still parked there.
FAILED_WAIT_MEMO = "tower_failed_wait_seconds"
# Carried runs recorded before they took their state in ``@workflow.init`` replay without.
CARRIED_INIT_PATCH = "tower-carried-init"


# The retry/abort updates exist for runs parked in the dead-letter wait before an upgrade.
OLD_RUNS_ONLY = ("only a FAILED run parked in the dead-letter wait (started before FAILED "
                 "failed the workflow execution) takes a retry or abort update; a run that "
                 "fails now is a failed workflow execution: recover it with "
                 "`tower retry RUN --from NODE`, which resets it")


class NodeDriven:
    """The strategy of node-driven machines: run the current node (behind its gate, if
    one applies) and take the move its route picks. A terminal ends the run; only runs
    recorded with the dead-letter wait still wait for an operator at FAILED."""

    carries_over = True

    async def step(self, run: AgentWorkflow) -> None:
        before, seen = run.current, len(run._log)
        with tracing.state_span(run.machine.name, before) as span:
            await run._run_node()
            tracing.close_state(span, before, run.current, run._log[seen:])

    async def settle(self, run: AgentWorkflow) -> bool:
        if (run.current.node != DONE and not workflow.patched(FAILED_IS_FAILURE_PATCH)
                and await run._await_operator()):
            return True
        run._closing = True
        # A decision handler may still be reporting its outcome: let it answer first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return False


class AgentWorkflow(MachineRun, Gatekeeper):
    """Base of node-driven agents: the loop with the ``NodeDriven`` strategy and approval
    gates (``Gatekeeper``). The ``retry``/``abort`` updates serve only runs recorded with
    the dead-letter wait (still parked in it after an upgrade); a run that fails now is a
    failed workflow execution, recovered by ``tower retry`` (a Temporal reset)."""

    # Runs recorded with the dead-letter wait: how long a FAILED one stays open.
    failed_wait: ClassVar[timedelta] = timedelta(days=7)

    def __init__(self) -> None:
        super().__init__()
        self._init_gates()
        self._decision: RetryRequest | AbortRequest | None = None
        self._closing = False

    async def drive(
        self, state: S, *, carried: Carry | None = None,
        approvals: ApprovalSettings | None = None,
    ) -> S:
        """Run the machine from its entry node until DONE (its final state) or FAILED
        (raises ``ApplicationError(type="AgentFailed")``: the workflow execution fails).

        With ``carried`` (a run continued-as-new), ``state`` (made from ``carried.state``)
        already stands on its node: the run goes on from there, with no new START
        transition; a carry that is not the run's own fails it at once. ``approvals`` is the
        HMAC setting of runs started before signed decisions (agents call ``admit``).
        """
        if approvals is not None:
            self._use_approval_settings(approvals)
        if self._trust is not None and self._trust.policy.unsigned_allowed:
            state = set_engine_fields(state, unsigned_decisions=True)
        # The engine hands back the state type it is given: the run ends in the agent's own.
        return cast(S, await self.run_machine(NodeDriven(), state, carried=carried))

    async def _await_operator(self) -> bool:
        """Runs recorded with the dead-letter wait: hold a FAILED run open until an
        operator decides or ``failed_wait`` passes. True when the run goes on (a retry)."""
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
        at, eid = workflow.now(), event_id()
        if isinstance(decision, RetryRequest):
            self._record(*operator_retry(self.machine, self.current, decision.node, decision.by,
                                         at=at, event_id=eid))
            return True
        if isinstance(decision, AbortRequest):
            self._record(*operator_abort(self.machine, self.current, decision.by,
                                         decision.reason, at=at, event_id=eid))
        return False

    def take_carried(self, carry: Carry | None) -> None:
        """Call from the agent's ``@workflow.init``: a run continued-as-new takes its carried
        state and roster snapshot before its first workflow task, so a decision that reaches
        it in that task is judged, not refused as "not started yet". Only from the run's own
        continue-as-new (``carry_refused``: not a raw, cron or retry start's input, which
        ``drive`` then refuses); the run still re-reads the roster at once."""
        if (carry is None or carry.trust is None or carry_refused(carry) is not None
                or not workflow.patched(CARRIED_INIT_PATCH)):
            return
        self._state = self.machine.state_type.model_validate(carry.state)
        self._trust = carry.trust

    def carry(self) -> Carry:
        return super().carry().model_copy(update={"trust": self._trust})

    def carry_over_due(self) -> bool:
        # A gate that returned to carry over after a flood of signals (Gatekeeper) is due.
        return super().carry_over_due() or self._signals_taken >= CARRY_AFTER_SIGNALS

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
            raise IllegalTransition(where, "?", OLD_RUNS_ONLY)
        if self._decision is not None:
            raise IllegalTransition(FAILED, "?", "a decision is already pending")

    async def _run_node(self) -> None:
        state = self.current
        step = next_step(self.machine, state)
        if isinstance(step, Hold):
            await self.hold(step.gate, resume=step.resume)
            return
        node = self.machine.nodes[step.node]
        ctx = TemporalContext(self.machine.name, node, state.step, list(self.models), self,
                              decision=approving_decision(state, node.name))
        try:
            update = dict(await node.fn(ctx, state))
        except (NodeFailed, ActivityError) as exc:
            # A failed node's model calls were still paid for.
            self._calls += ctx.model_calls
            state = apply_update(state, _spent(node.name, ctx))
            self._record(*node_error(self.machine, state, node.name, _reason(exc),
                                     at=workflow.now(), event_id=event_id(), calls=ctx.calls))
            return
        update.update(_spent(node.name, ctx))
        self._calls += ctx.model_calls
        then = after_node(self.machine, state, node.name, update, ctx.calls)
        if isinstance(then, Hold):
            await self.hold(then.gate, then.update, then.calls)
            return
        self._record(*advance(self.machine, state, node.name, update, at=workflow.now(),
                              event_id=event_id(), calls=ctx.calls))


def _spent(node: str, ctx: TemporalContext) -> dict[str, Any]:
    if not ctx.usage.calls:
        return {}
    return {"usage": ctx.usage, "node_usage": {node: ctx.usage}}




def _reason(exc: BaseException) -> str:
    # An activity's own message is in its cause; "Activity task failed" says nothing.
    while isinstance(exc, ActivityError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, ApplicationError) and exc.type:
        return f"{exc.type}: {exc.message}"
    return str(exc)
