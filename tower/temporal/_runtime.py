"""Node-driven machines on Temporal: ``AgentWorkflow``.

Each agent subclasses ``AgentWorkflow``, decorated ``@agent(GRAPH)``; a step runs the
current node (behind its gate, if one applies) and takes the move its route picks
(tower/core/interpreter.py ``node_step``, the same in-process). The loop, the queries, the
search attributes and the Web UI's current details are ``MachineRun``'s; the gate's waiting
is ``GateRuntime``'s. The loop is the checkpoint: every model and tool call inside a node is
an activity, so its result is in the history and a new worker resumes from there.

A span for each state a run passes through (agent, step, from/to, model, tokens): only the
OpenTelemetry API, a no-op without a provider; with Temporal's replay-safe one
(telemetry.py), span ids are deterministic and a replay exports nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar, cast

from opentelemetry import context, trace
from opentelemetry.trace import Span, Status, StatusCode
from temporalio import workflow
from temporalio.common import RawValue

from tower.contract import names
from tower.contract.decisions import Decision, GateRecord
from tower.contract.pending import PendingView
from tower.core.carry import Carry
from tower.core.engine import Transition
from tower.core.gates import Gate, Outcome
from tower.core.interpreter import node_step
from tower.core.state import AgentState, S, set_engine_fields
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
        self._traced = installed()

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

TRACER = "tower.agent"
# The API's tracer: it follows the provider installed later too, so one serves every run.
_tracer = trace.get_tracer(TRACER)


def installed() -> bool:
    """Whether a tracer provider is installed (without one, every span is dropped)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextmanager
def state_span(agent: str, state: AgentState) -> Iterator[Span]:
    """Open the span of the state ``state`` stands on; model and tool spans nest in it."""
    if not installed():
        yield trace.INVALID_SPAN  # every span would be dropped
        return
    span = _tracer.start_span(f"state {state.node}", attributes={
        "tower.agent": agent, "tower.node": state.node, "tower.step": state.step,
    })
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield span
    except GeneratorExit:
        # The worker evicted the run mid-state and its coroutine is being closed, often in
        # another context (garbage collection), where the token cannot be detached. The
        # state is not over either: leave the span open; replaying the run reopens it.
        raise
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        _close(span, token)
        raise
    else:
        _close(span, token)


def _close(span: Span, token: object) -> None:
    span.end()
    context.detach(token)  # type: ignore[arg-type]


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
