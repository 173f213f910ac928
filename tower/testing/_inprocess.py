"""Run a node, or a whole machine, in-process: scripted model and tool answers, no server.

The way a LangGraph user ``invoke``s a graph in a unit test: milliseconds, and the loop a
worker runs (tower/core/interpreter.py: this runner is its in-process host), so the guards,
gates, budgets and log properties (``check_log``) are the real ones.

    run = await run_agent(RefundAgent, RefundState(...), model={"reason": [...]},
                          tools={invoice_balance: {...}}, decisions=[approve("ann")])
    assert run.path == ["START", "reason", "issue_refund", ...]

A node's ``NodeContext`` here is ``ScriptedContext``: the model is asked through the same
``NodeContext._ask`` a worker uses (same request, same checks, same corrections); the answers
come from scripts, not from an activity.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from tower.activities.scripted import Script
from tower.contract.decisions import Decision, GateRecord, Verdict, proposal_digest
from tower.contract.failures import Code, DecisionRefused, NodeFailed, TowerError
from tower.contract.stream import custom_data
from tower.contract.wire import Authority, ModelReply, ModelRequest, ToolCallRequest, WindowRef
from tower.core.context import NodeContext
from tower.core.edits import check_edits
from tower.core.engine import Transition, start
from tower.core.gates import Gate
from tower.core.graph import START, TERMINALS, Machine, Node
from tower.core.interpreter import Arrival, Ledger, event_step, node_step
from tower.core.keys import authority_of
from tower.core.state import AgentState, Usage
from tower.core.tools import Tool, argument_problem, called, spec_for

S = TypeVar("S", bound=AgentState)
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# A node's answers: a script, or a list of answers given in order (across its visits).
ModelAnswers = Script | Sequence["str | ToolCallRequest"]
# A tool's answer: a fixed result, a function of the arguments, or a function of the
# arguments and the call's Authority (what the run's state allows a side effect).
ToolAnswer = (Callable[[dict[str, Any]], dict[str, Any]]
              | Callable[[dict[str, Any], Authority], dict[str, Any]] | Mapping[str, Any])
TEST_MODEL = "scripted-test"


class Stuck(TowerError):
    """The run waits for something no one in the test will ever do (a user's message, a
    decision, an event): ``run_agent`` stops there, as a worker's run would wait. Not a
    node failure: nothing failed."""


class ScriptedContext(NodeContext):
    """A node's world in a unit test. ``model``: node -> answers; ``tools``: tool -> answer
    (a function of the arguments, or a fixed result); ``children``: child run -> result."""

    def __init__(
        self, agent: str, node: Node, step: int, *, model: Mapping[str, ModelAnswers],
        tools: Mapping[str, ToolAnswer], run_id: str, now: datetime, host: Any = None,
        children: Callable[[Any, Any], Any] | None = None, authority: Authority | None = None,
    ) -> None:
        super().__init__(agent, node, step, host=host, authority=authority)
        self.authorities: list[Authority] = []  # what each side effect was told
        self.requests: list[ModelRequest] = []  # what the model was asked, for assertions
        self.emitted: list[dict[str, Any]] = []  # the node's own events: {label, data}
        self._model, self._tools, self._children = model, tools, children
        self._run_id, self._now = run_id, now

    @property
    def run_id(self) -> str:
        return self._run_id

    def now(self) -> datetime:
        return self._now

    async def wait(self, until: Callable[[], bool]) -> None:
        if not until():
            raise Stuck(f"{self.node.name} waits for something the test never does")

    async def child(self, run: Any, arg: Any, *, id: str,
                    memo: dict[str, Any] | None = None) -> Any:
        if self._children is None:
            raise NodeFailed(f"{self.node.name}: no children in this test (children=...)")
        result = self._children(run, arg)
        return await result if inspect.isawaitable(result) else result

    def emit(self, label: str, data: dict[str, Any] | None = None) -> None:
        self.emitted.append(custom_data(label, data))  # checked as on a worker

    async def tool(self, tool: Tool | ToolCallRequest | str,
                   arguments: BaseModel | dict[str, Any] | None = None) -> dict[str, Any]:
        name, arguments = called(self.node, tool, arguments)
        spec = spec_for(self.node, name)
        problem = None if spec is None else argument_problem(spec, arguments)
        if problem is not None:  # the tool activity refuses bad arguments the same way
            raise NodeFailed(f"bad arguments for {name}: {problem}")
        answer = self._tools.get(name)
        if answer is None:
            raise NodeFailed(f"no answer for tool {name!r} in this test (tools={{...}})")
        # As on a worker: a side effect is told what the runtime knows, not the node's say.
        authority = self.authority if spec is None or spec.side_effect else Authority()
        self.calls.append(f"tool:{name}")
        self.authorities.append(authority)
        if not callable(answer):
            return dict(answer)
        takes_authority = len(inspect.signature(answer).parameters) > 1
        return dict(answer(arguments, authority) if takes_authority  # type: ignore[call-arg]
                    else answer(arguments))  # type: ignore[call-arg]

    async def reply(self, request: ModelRequest, local: bool) -> ModelReply:
        """The script's answer. A window is counted here, not stored: the reply's window
        has as many messages as were asked and answered (a summary resets it to one)."""
        self.requests.append(request)
        said = self._answer(request)
        reply = (ModelReply(model=TEST_MODEL, tool_calls=[said])
                 if isinstance(said, ToolCallRequest) else ModelReply(model=TEST_MODEL,
                                                                      content=said))
        reply.usage = Usage(calls=1)
        if request.windowed:
            before = request.window.messages if request.window and not request.summarise else 0
            count = before + (1 if request.summarise else len(request.messages) + 1)
            reply.window = WindowRef(ref=f"test-window-{self.step}-{count}", messages=count,
                                     tokens=count * 10)
        return reply

    def _answer(self, request: ModelRequest) -> str | ToolCallRequest:
        answers = self._model.get(self.node.name)
        if answers is None:
            raise NodeFailed(f"no model answers for node {self.node.name!r} in this test")
        if callable(answers):
            try:
                return answers(request)
            except Exception as exc:  # a bug in the script: say whose, at once
                name = getattr(answers, "__qualname__", repr(answers))
                exc.add_note(f"raised by the script for node {self.node.name!r} ({name})")
                raise
        if not isinstance(answers, list) or not answers:
            raise NodeFailed(f"node {self.node.name!r} asked the model more often than "
                             "this test scripted")
        return answers.pop(0)  # the runner's own copy: answers are used up across visits


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
    runner = _Runner(agent, state, run_id, _answers(agent, model), _by_name(tools),
                     list(decisions), [dict(e) for e in events], host, children, expire)
    if state.node == START:
        runner.record(*start(runner.machine, state, at=T0, event_id=1))
    ledger = Ledger() if hasattr(agent, "EventModel") else None
    try:
        while runner.current.node not in TERMINALS and len(runner.log) < max_steps:
            await (node_step(runner) if ledger is None else event_step(runner, ledger))
    except Stuck:
        pass  # waiting for what the test did not script
    return Run(runner.current, runner.log, runner.contexts, runner.states)


def _outside_a_run(agent: Any) -> Any:
    """An instance of ``agent`` without a run's input (its ``@workflow.init`` takes one)."""
    plain = getattr(agent, "plain_init", None)
    if plain is None:
        return agent()
    instance = agent.__new__(agent)
    plain(instance)
    return instance


class _Runner:
    """The in-process host of the loop (tower/core/interpreter.py): scripted answers and
    decisions, the test's events, a clock that moves a second a step."""

    node_failures: tuple[type[BaseException], ...] = (NodeFailed,)

    def __init__(self, agent: Any, state: AgentState, run_id: str,
                 model: Mapping[str, ModelAnswers], tools: Mapping[str, ToolAnswer],
                 decisions: list[Said], events: list[dict[str, Any]], host: Any,
                 children: Callable[[Any, Any], Any] | None, expire: bool) -> None:
        self.agent, self.machine, self.current = agent, _machine(agent), state
        self.run_id, self.model, self.tools = run_id, model, tools
        self.decisions, self.events, self.host, self.children = decisions, events, host, children
        self.expire = expire  # a gate with no scripted decision left: expire, or wait
        self.log: list[Transition] = []
        self.states: list[Any] = []
        self.contexts: list[ScriptedContext] = []
        self.waited = timedelta(0)  # how long gates waited for their expiry
        # An event-driven agent says what an event changes (on_event): ask an instance of
        # it, made outside any workflow (its constructor touches no Temporal API).
        self.instance: Any = _outside_a_run(agent) if hasattr(agent, "EventModel") else None
        self.EventModel: type[BaseModel] = getattr(agent, "EventModel", BaseModel)

    def context(self, node: str, *, visit: bool = False) -> ScriptedContext:
        state = self.current
        authority = authority_of(state, node, getattr(self.agent, "Policy", None)) if (
            visit) else None
        ctx = ScriptedContext(self.machine.name, self.machine.nodes[node], state.step,
                              model=self.model, tools=self.tools, run_id=self.run_id,
                              now=self.now(), host=self.host, children=self.children,
                              authority=authority)
        self.contexts.append(ctx)
        return ctx

    def now(self) -> datetime:
        return T0 + timedelta(seconds=len(self.log)) + self.waited

    def event_id(self) -> int:
        return len(self.log) + 1

    def record(self, state: Any, transition: Transition) -> None:
        self.current = state
        self.log.append(transition)
        self.states.append(state)

    async def opening(self, gate: Gate) -> tuple[str, str | None, timedelta]:
        return self.run_id, None, timedelta(0)

    async def decision(self, gate: Gate, pending: GateRecord, *, resume: bool
                       ) -> Decision | None:
        """The next scripted decision; with none left, the request expires (the clock
        moves to its expiry), or with ``expire=False`` the run stops, waiting."""
        if self.decisions:
            return self.scripted_decision(gate, pending)
        if not self.expire:
            raise Stuck(f"gate {gate.name} waits for a decision the test did not script")
        self.waited += max(pending.expires_at - self.now(), timedelta(0))
        return None

    def closed(self) -> None:
        pass

    def scripted_decision(self, gate: Gate, pending: GateRecord) -> Decision:
        said = self.decisions.pop(0)
        decision = Decision(
            decision_id=f"d{len(self.log)}", tenant="test", run=self.run_id, gate=gate.name,
            decision=said.verdict, approver=said.by, role=said.role or pending.role,
            expires_at=pending.expires_at, note=said.note, edits=dict(said.edits),
            request=pending.step, run_id=pending.run_id, proposal=proposal_digest(pending))
        problem = check_edits(gate, self.current, decision)
        if decision.role != pending.role or problem:  # what a real run would refuse
            raise DecisionRefused(f"gate {gate.name} refuses the scripted decision: "
                                  f"{problem or f'role {decision.role!r} may not decide it'}",
                                  code=Code.BAD_EDIT if problem else Code.NOT_AUTHORIZED)
        return decision

    def on_event(self, state: AgentState, event: Any) -> Mapping[str, Any]:
        return dict(self.instance.on_event(state, event))

    async def next_event(self, action: Arrival | None) -> Arrival:
        """The entry action's event, else the test's next one."""
        if action is not None:
            return action
        if not self.events:
            raise Stuck("the run waits for an event the test did not script")
        return {"step": self.current.step, **self.events.pop(0)}, "signal", []

    def reject(self, raw: Any, source: str, why: str) -> None:
        pass  # refused: nothing changes (a worker keeps why in its audit trail)


def _machine(agent: Any) -> Machine:
    return agent if isinstance(agent, Machine) else agent.machine


def _answers(agent: Any, model: Mapping[str, ModelAnswers] | None) -> dict[str, ModelAnswers]:
    # The agent's own scripts (the ones the scripted model uses), each node's replaced by
    # the test's answers for that node only.
    merged = {**dict(getattr(agent, "scripts", {})), **dict(model or {})}
    # Lists are copied: a run uses its answers up without touching the caller's.
    return {node: list(a) if isinstance(a, list | tuple) else a for node, a in merged.items()}
