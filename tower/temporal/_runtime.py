"""Node-driven machines on Temporal: ``AgentWorkflow``.

Each agent subclasses ``AgentWorkflow``, decorated ``@agent(GRAPH)``; a step runs the
current node (behind its gate, if one applies) and takes the move its route picks
(tower/core/interpreter.py ``node_step``, the same in-process). The loop, the queries, the
search attributes and the Web UI's current details are ``MachineRun``'s; the gate's waiting
is ``GateRuntime``'s. The loop is the checkpoint: every model and tool call inside a node is
an activity, so its result is in the history and a new worker resumes from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar, cast

from temporalio import workflow
from temporalio.common import RawValue

from tower.contract import names
from tower.contract.decisions import Decision, GateRecord
from tower.contract.pending import PendingView
from tower.core.carry import Carry
from tower.core.gates import Gate, Outcome
from tower.core.interpreter import node_step
from tower.core.state import AgentState, S, set_engine_fields
from tower.temporal import _tracing as tracing
from tower.temporal._gate import GateRuntime
from tower.temporal._machine_run import MachineRun, carry_refused


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
        # Asked once a run: a provider is installed with the worker (telemetry.py), before
        # its runs; without one, a step opens no span at all.
        self._traced = tracing.installed()

    @workflow.update(name=names.DECIDE.name)
    async def decide(self, raw: dict[str, Any]) -> Outcome:
        """A decision as an update: answers with the outcome the run reported."""
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
        """The pending request, every request so far, and the refused decisions."""
        return self._gate.approvals()

    async def drive(self, state: S, *, carried: Carry | None = None) -> S:
        """Run the machine from its entry node until DONE (its final state) or FAILED
        (raises ``ApplicationError(type="AgentFailed")``: the workflow execution fails).

        With ``carried`` (a run continued-as-new), ``state`` (made from ``carried.state``)
        already stands on its node: the run goes on from there, with no new START
        transition; a carry that is not the run's own fails it at once.
        """
        trust = self.trust.snapshot
        if trust is not None and trust.policy.unsigned_allowed:
            state = set_engine_fields(state, unsigned_decisions=True)
        # The engine hands back the state type it is given: the run ends in the agent's own.
        return cast(S, await self.run_machine(state, carried=carried))

    async def run_from(self, state: AgentState, request: Any) -> AgentState:
        return await self.drive(state)

    def take_carried(self, carry: Carry | None) -> None:
        """A run continued-as-new takes its carried state and roster snapshot before its
        first workflow task, so a decision that reaches it in that task is judged, not
        refused as "not started yet". Only from the run's own continue-as-new
        (``carry_refused``: not a raw, cron or retry start's input, which ``drive`` then
        refuses); the run still re-reads the roster at once."""
        if carry is None or carry.trust is None or carry_refused(carry) is not None:
            return
        self._state = self.machine.state_type.model_validate(carry.state)
        self.trust.take(carry.trust)

    def carry(self) -> Carry:
        return super().carry().model_copy(update={"trust": self.trust.snapshot})

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
        with tracing.state_span(self.machine.name, before) as span:
            await node_step(self)
            tracing.close_state(span, before, self.current, self._log[seen:])

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
