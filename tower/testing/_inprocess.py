"""Run a node, or a whole machine, in-process: scripted model and tool answers, no server.

The way a LangGraph user ``invoke``s a graph in a unit test: milliseconds, and the same
engine a worker runs — ``start``, ``advance``, ``node_error``, the gates' ``open_gate`` /
``close_gate`` and ``apply_event`` write the transition log, so the guards, budgets and
log properties (``check_log``) are the real ones.

    run = await run_agent(RefundAgent, RefundState(...), model={"reason": [...]},
                          tools={invoice_balance: {...}}, decisions=[approve("ann")])
    assert run.path == ["START", "reason", "issue_refund", ...]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from tower.contract.decisions import Decision, GateRecord, GateStatus, Verdict, proposal_digest
from tower.contract.failures import Code
from tower.contract.wire import Authority
from tower.core.context import NodeContext
from tower.core.edits import check_edits
from tower.core.engine import Transition, advance, fail, node_error, start
from tower.core.errors import DecisionRefused, NodeFailed, TowerError
from tower.core.events import Event, apply_event
from tower.core.gates import (
    Gate,
    close_gate,
    open_gate,
    pending_record,
)
from tower.core.graph import START, TERMINALS, Machine
from tower.core.interpreter import (
    Close,
    Hold,
    Recheck,
    after_node,
    decided,
    moves_on_after_approval,
    next_step,
    rechecked,
)
from tower.core.keys import authority_of
from tower.core.state import AgentState, apply_update
from tower.testing._context import ModelAnswers, ScriptedContext, Stuck, ToolAnswer

S = TypeVar("S", bound=AgentState)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Said:
    """A scripted decision for the next gate: ``approve(...)`` or ``reject(...)``."""

    verdict: Verdict
    by: str
    role: str | None = None  # default: the role the gate asks for
    edits: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


def approve(by: str, *, role: str | None = None, edits: Mapping[str, Any] | None = None,
            note: str = "") -> Said:
    return Said(Verdict.APPROVE, by, role, dict(edits or {}), note)


def reject(by: str, note: str = "", *, role: str | None = None) -> Said:
    return Said(Verdict.REJECT, by, role, {}, note)


@dataclass
class Run(Generic[S]):
    """What happened: the final state and the transition log, as a worker would record
    (``check_log(agent.machine, run.log, run.states)`` audits it)."""

    state: S
    log: list[Transition]
    contexts: list[ScriptedContext]  # one per node visit: calls and model requests
    states: list[S] = field(default_factory=list)  # the state after each move of ``log``

    @property
    def path(self) -> list[str]:
        return [self.log[0].source, *(t.target for t in self.log)] if self.log else []


def _by_name(tools: Mapping[Any, ToolAnswer] | None) -> dict[str, ToolAnswer]:
    """A test's tool answers, keyed by the tool (its object; a string for ``server.tool``)."""
    return {getattr(tool, "name", tool): answer for tool, answer in (tools or {}).items()}


async def run_node(agent: Any, node: str, state: AgentState, *,
                   model: Mapping[str, ModelAnswers] | None = None,
                   tools: Mapping[Any, ToolAnswer] | None = None, host: Any = None,
                   run_id: str = "test-run") -> tuple[dict[str, Any], ScriptedContext]:
    """Run one node on ``state``: its update (not applied) and the context it used."""
    machine = _machine(agent)
    ctx = ScriptedContext(machine.name, machine.nodes[node], state.step,
                          model=_answers(agent, model), tools=_by_name(tools),
                          run_id=run_id, now=T0, host=host)
    return dict(await machine.nodes[node].fn(ctx, state)), ctx


async def run_agent(
    agent: Any, state: S, *, model: Mapping[str, ModelAnswers] | None = None,
    tools: Mapping[Any, ToolAnswer] | None = None, decisions: Iterable[Said] = (),
    events: Iterable[Mapping[str, Any]] = (), host: Any = None,
    children: Callable[[Any, Any], Any] | None = None, run_id: str = "test-run",
    max_steps: int = 500, expire: bool = True,
) -> Run[S]:
    """Run ``agent`` (an ``@agent`` class, or a Machine) from START until it ends, parks at
    a gate with no scripted decision left, or (event-driven) runs out of events.

    ``model`` replaces the answers of the nodes it names; the others answer with the
    agent's own scripts (``@agent(..., scripts=...)``). A gate
    takes the next of ``decisions``; with none left it expires (its timeout route), or with
    ``expire=False`` the run stops there, waiting, as a worker's run would. A
    ``state`` that stands on a node (``Run.state`` of an earlier call, as a run carried
    over by continue-as-new) goes on from there; one waiting at a gate takes up its request.
    """
    runner = _Runner(agent, run_id, _answers(agent, model), _by_name(tools),
                     list(decisions), [dict(e) for e in events], host, children)
    runner.expire = expire
    if state.node == START:
        state = runner.record(start(runner.machine, state, at=T0, event_id=1))
    # else: the state of a run that stopped on a node (a carried-over run) goes on from there.
    event_driven = hasattr(agent, "EventModel")
    while state.node not in TERMINALS and len(runner.log) < max_steps:
        before = len(runner.log)
        state = await (runner.event_step(state) if event_driven else runner.node_step(state))
        if len(runner.log) == before:  # waiting for what the test did not script
            break
    return Run(state, runner.log, runner.contexts, runner.states)


def _outside_a_run(agent: Any) -> Any:
    """An instance of ``agent`` without a run's input (its ``@workflow.init`` takes one)."""
    plain = getattr(agent, "plain_init", None)
    if plain is None:
        return agent()
    instance = agent.__new__(agent)
    plain(instance)
    return instance


class _Runner:
    def __init__(self, agent: Any, run_id: str, model: Mapping[str, ModelAnswers],
                 tools: Mapping[str, ToolAnswer], decisions: list[Said],
                 events: list[dict[str, Any]], host: Any,
                 children: Callable[[Any, Any], Any] | None) -> None:
        self.agent, self.machine = agent, _machine(agent)
        self.run_id, self.model, self.tools = run_id, model, tools
        self.decisions, self.events, self.host, self.children = decisions, events, host, children
        self.log: list[Transition] = []
        self.states: list[Any] = []
        self.contexts: list[ScriptedContext] = []
        self.accepted: set[str] = set()
        self.expire = True  # a gate with no scripted decision left: expire, or wait
        self.entered: set[int] = set()
        # An event-driven agent says what an event changes (on_event): ask an instance of
        # it, made outside any workflow (its constructor touches no Temporal API).
        self.instance: Any = _outside_a_run(agent) if hasattr(agent, "EventModel") else None

    def context(self, node: str, step: int, authority: Authority | None = None
                ) -> ScriptedContext:
        ctx = ScriptedContext(self.machine.name, self.machine.nodes[node], step,
                              model=self.model, tools=self.tools, run_id=self.run_id,
                              now=self.now(), host=self.host, children=self.children,
                              authority=authority)
        self.contexts.append(ctx)
        return ctx

    def now(self) -> datetime:
        return T0 + timedelta(seconds=len(self.log))

    def record(self, moved: tuple[S, Transition]) -> S:
        self.log.append(moved[1])
        self.states.append(moved[0])
        return moved[0]

    async def node_step(self, state: S) -> S:
        step = next_step(self.machine, state)
        if isinstance(step, Hold):
            return await self.hold(state, step)
        node = self.machine.nodes[step.node]
        ctx = self.context(node.name, state.step, authority_of(
            state, node.name, getattr(self.agent, "Policy", None)))
        at, eid = self.now(), len(self.log) + 1
        try:
            update = dict(await node.fn(ctx, state))
        except Stuck:
            return state  # parked: waiting for what the test did not script
        except NodeFailed as exc:
            spent = apply_update(state, _spent(node.name, ctx))
            return self.record(node_error(self.machine, spent, node.name, str(exc), at=at,
                                          event_id=eid, calls=ctx.calls))
        update.update(_spent(node.name, ctx))
        then = after_node(self.machine, state, node.name, update, ctx.calls)
        if isinstance(then, Hold):
            return await self.hold(state, then)
        return self.record(advance(self.machine, state, node.name, update, at=at,
                                   event_id=eid, calls=ctx.calls))

    async def hold(self, state: S, step: Hold) -> S:
        """Open the gate (or take up the request a carried-over run left open), then end
        it with the next scripted decision — or, with none left, by its expiry."""
        gate = step.gate
        if not step.resume:
            state = self.record(open_gate(self.machine, state, gate, at=self.now(),
                                          event_id=len(self.log) + 1, run_id=self.run_id,
                                          update=step.update, calls=step.calls))
        pending = pending_record(state)
        if pending is None:  # the update could not be applied: the run failed instead
            return state
        if not self.decisions and not self.expire:
            return state  # waiting for a decision the test did not script
        decision = self.scripted_decision(state, gate, pending) if self.decisions else None
        ending = decided(gate, pending, decision)
        if isinstance(ending, Recheck):
            assert gate.recheck is not None  # decided() asks for a re-check only then
            ctx = self.context(gate.node, state.step)
            try:
                stale = await gate.recheck(ctx, apply_update(state, ending.decision.edits))
            except NodeFailed as exc:
                ending = rechecked(gate, ending.decision, failed=str(exc))
            else:
                ending = rechecked(gate, ending.decision, stale=stale)
        state = self.close(state, gate, ending)
        if ending.status == GateStatus.APPROVED and moves_on_after_approval(gate, state):
            state = self.record(advance(self.machine, state, gate.node, {}, at=self.now(),
                                        event_id=len(self.log) + 1))
        return state

    def scripted_decision(self, state: S, gate: Gate, pending: GateRecord) -> Decision:
        said = self.decisions.pop(0)
        decision = Decision(
            decision_id=f"d{len(self.log)}", tenant="test", run=self.run_id, gate=gate.name,
            decision=said.verdict, approver=said.by, role=said.role or pending.role,
            expires_at=pending.expires_at, note=said.note, edits=dict(said.edits),
            request=pending.step, run_id=pending.run_id, proposal=proposal_digest(pending))
        problem = check_edits(gate, state, decision)
        if decision.role != pending.role or problem:  # what a real run would refuse
            raise DecisionRefused(f"gate {gate.name} refuses the scripted decision: "
                                  f"{problem or f'role {decision.role!r} may not decide it'}",
                                  code=Code.BAD_EDIT if problem else Code.NOT_AUTHORIZED)
        return decision

    def close(self, state: S, gate: Gate, ending: Close) -> S:
        return self.record(close_gate(self.machine, state, gate, ending.status,
                                      target=ending.target, at=self.now(),
                                      event_id=len(self.log) + 1, decision=ending.decision,
                                      why=ending.why, update=ending.update))

    async def event_step(self, state: S) -> S:
        """An event-driven machine: run the state's entry action once, then apply the next
        event (the action's, else the test's) through the guards."""
        raw, source, calls = None, "signal", []
        if state.step not in self.entered:
            self.entered.add(state.step)
            ctx = self.context(state.node, state.step)
            try:
                data = await self.machine.nodes[state.node].fn(ctx, state)
            except NodeFailed as exc:
                return self.record(fail(self.machine, state, str(exc), at=self.now(),
                                        event_id=len(self.log) + 1, calls=ctx.calls))
            if data is not None:
                raw = {**data, "step": state.step}
                source, calls = f"action:{state.node}", ctx.calls
        if raw is None:
            if not self.events:
                return state
            raw = {"step": state.step, **self.events.pop(0)}
        try:
            parsed = self.agent.EventModel.model_validate(raw)
            data = parsed.model_dump(mode="json", exclude={"step"}, exclude_defaults=True)
            event = Event(step=parsed.step, data=data, source=source)
            moved = apply_event(self.machine, state, event,
                                dict(self.instance.on_event(state, parsed)),
                                accepted=self.accepted, at=self.now(),
                                event_id=len(self.log) + 1, calls=calls)
        except (ValidationError, TowerError):
            return state  # refused: nothing changes (the worker records why)
        self.accepted.add(event.key)
        return self.record(moved)


def _machine(agent: Any) -> Machine:
    return agent if isinstance(agent, Machine) else agent.machine


def _answers(agent: Any, model: Mapping[str, ModelAnswers] | None) -> dict[str, ModelAnswers]:
    # The agent's own scripts (the ones the scripted model uses), each node's replaced by
    # the test's answers for that node only.
    merged = {**dict(getattr(agent, "scripts", {})), **dict(model or {})}
    # Lists are copied: a run uses its answers up without touching the caller's.
    return {node: list(a) if isinstance(a, list | tuple) else a for node, a in merged.items()}


def _spent(node: str, ctx: NodeContext) -> dict[str, Any]:
    if not ctx.usage.calls:
        return {}
    return {"usage": ctx.usage, "node_usage": {node: ctx.usage}}
