"""lifecycle — the event-driven guard table.

States IDLE, PLANNING, TOOL_CALL, EVALUATING, RECOVERING, DONE, FAILED. Events arrive
as signals (or from a state's entry action) and move the run only through this table;
anything else is refused with IllegalTransition and recorded, and changes nothing:

| from       | to         | guard                                         |
|------------|------------|-----------------------------------------------|
| IDLE       | PLANNING   | ``start_is_true``: event ``start`` is true    |
| PLANNING   | TOOL_CALL  | ``names_a_tool``: the event names a tool      |
| TOOL_CALL  | EVALUATING | ``tool_done``: event ``tool_done``            |
| TOOL_CALL  | RECOVERING | ``carries_error``: the event carries an error |
| EVALUATING | PLANNING   | ``not_solved``                                |
| EVALUATING | DONE       | ``solved``                                    |
| RECOVERING | PLANNING   | ``recovered`` (at most MAX_RECOVERIES)        |
| RECOVERING | FAILED     | ``recovery_exhausted`` (error recorded)       |

Entry actions are side effects, not part of the machine: entering PLANNING asks the
model for a plan (an activity) whose answer comes back as an event; TOOL_CALL runs
the planned tool; EVALUATING asks the model whether the goal is met; RECOVERING
decides in code whether a retry is left. A step budget backs up every cycle.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import lifecycle as scripted
from activities.tools import accounts, billing, helpdesk
from tower import (
    ADD,
    APPEND,
    DONE,
    FAILED,
    AgentState,
    EventWorkflow,
    Graph,
    Message,
    NodeContext,
    NodeFailed,
    ToolCallRequest,
    agent,
)

MAX_RECOVERIES = 2
MAX_STEPS = 40
PLAN_TOOLS = (accounts.lookup_account, billing.lookup_invoice, helpdesk.search_docs)


class LifecycleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=2000,
                      examples=["Check account ACC-1001 and invoice INV-2001"])
    # True: the start event comes with the input. False: the run waits in IDLE for a
    # signed `start` event ({"step": 1, "start": true}, from a roster member allowed to
    # send lifecycle events).
    start: bool = True


class LifecycleEvent(BaseModel):
    """Every event the machine understands. Unknown fields are refused, not ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=0, description="the run's step the sender saw")
    start: bool | None = None
    tool: str | None = Field(default=None, max_length=100)
    arguments: dict[str, Any] = Field(default_factory=dict)
    tool_done: bool | None = None
    result: dict[str, Any] | None = None
    error: str | None = Field(default=None, max_length=2000)
    solved: bool | None = None
    answer: str | None = Field(default=None, max_length=4000)
    recovered: bool | None = None


class Evaluation(BaseModel):
    solved: bool
    answer: str = ""


class LifecycleState(AgentState):
    goal: str
    event: LifecycleEvent | None = None  # the event being applied (guards read it)
    plans: Annotated[list[ToolCallRequest], APPEND] = Field(default_factory=list)
    results: Annotated[list[dict[str, Any]], APPEND] = Field(default_factory=list)
    recoveries: Annotated[int, ADD] = 0
    answer: str = ""


# The guard table, one predicate per row.
def start_is_true(s: LifecycleState) -> bool:
    return s.event is not None and s.event.start is True


def names_a_tool(s: LifecycleState) -> bool:
    return s.event is not None and bool(s.event.tool)


def tool_done(s: LifecycleState) -> bool:
    return s.event is not None and s.event.tool_done is True and not s.event.error


def carries_error(s: LifecycleState) -> bool:
    return s.event is not None and bool(s.event.error)


def not_solved(s: LifecycleState) -> bool:
    return s.event is not None and s.event.solved is False


def solved(s: LifecycleState) -> bool:
    return s.event is not None and s.event.solved is True


def recovered(s: LifecycleState) -> bool:
    return (s.event is not None and s.event.recovered is True
            and s.recoveries <= MAX_RECOVERIES)


def recovery_exhausted(s: LifecycleState) -> bool:
    return (s.event is not None and s.event.recovered is not None and bool(s.errors)
            and (s.event.recovered is False or s.recoveries > MAX_RECOVERIES))


def on_event(state: LifecycleState, event: LifecycleEvent) -> dict[str, Any]:
    """What an event records, depending on the state it arrives in."""
    update: dict[str, Any] = {"event": event}
    if state.node == "PLANNING" and event.tool:
        update["plans"] = [ToolCallRequest(name=event.tool, arguments=event.arguments)]
    elif state.node == "TOOL_CALL" and event.error:
        update |= {"errors": [event.error], "recoveries": 1}
    elif state.node == "TOOL_CALL" and event.tool_done:
        tool = state.plans[-1].name if state.plans else "?"
        update["results"] = [{"tool": tool, "result": event.result or {}}]
    elif state.node == "EVALUATING" and event.solved and event.answer:
        update["answer"] = event.answer
    return update


PLAN_PROMPT = (
    "You work towards the user's goal one tool call at a time. Call exactly one tool that "
    "brings the goal closer; the results and errors so far are in the conversation."
)
EVALUATE_PROMPT = (
    "Decide whether the goal is met by the tool results so far. Reply with JSON "
    "{\"solved\": true|false, \"answer\": \"...\"}; the answer is for the user."
)


async def idle(ctx: NodeContext, state: LifecycleState) -> None:
    """Nothing to do: wait for the `start` event."""
    return None


async def plan(ctx: NodeContext, state: LifecycleState) -> dict[str, Any]:
    """Ask the model for the next tool call; its answer comes back as an event."""
    answer = await ctx.ask(_conversation(state))
    if not answer.tool_calls:
        raise NodeFailed(f"PLANNING: the model answered without naming a tool: {answer.text}")
    call = answer.tool_calls[0]
    return {"tool": call.name, "arguments": call.arguments}


async def call_tool(ctx: NodeContext, state: LifecycleState) -> dict[str, Any]:
    """Run the planned tool; an error (in the result or of the activity) is an event too."""
    call = state.plans[-1]
    try:
        result = await ctx.tool(call)
    except NodeFailed as exc:  # the tool failed: its own words
        return {"error": f"{call.name}: {exc}"}
    if "error" in result:
        return {"error": f"{call.name}: {result['error']}"}
    return {"tool_done": True, "result": result}


async def evaluate(ctx: NodeContext, state: LifecycleState) -> dict[str, Any]:
    """Ask the model whether the goal is met."""
    answer = await ctx.ask(_conversation(state), schema=Evaluation)
    assert answer.parsed is not None
    return {"solved": answer.parsed.solved, "answer": answer.parsed.answer or None}


async def recover(ctx: NodeContext, state: LifecycleState) -> dict[str, Any]:
    """Code, not the model: is a retry left? (The guards check it again.)"""
    return {"recovered": state.recoveries <= MAX_RECOVERIES}


def _conversation(state: LifecycleState) -> list[Message]:
    convo = [Message(role="user", content=state.goal)]
    convo += [Message(role="tool", name=r["tool"], content=json.dumps(r["result"],
                                                                      sort_keys=True))
              for r in state.results]
    convo += [Message(role="user", content=f"error: {e}") for e in state.errors]
    return convo


_nodes = (
    Graph("lifecycle", LifecycleState)
    .node("IDLE", idle)  # type: ignore[arg-type]
    .node("PLANNING", plan, prompt=PLAN_PROMPT, tools=PLAN_TOOLS)
    .node("TOOL_CALL", call_tool, tools=PLAN_TOOLS)
    .node("EVALUATING", evaluate, prompt=EVALUATE_PROMPT)
    .node("RECOVERING", recover)
    .entry("IDLE")
    .budget(escalate_to=FAILED, max_steps=MAX_STEPS)
)
# The guard table above, row for row; no other move exists.
for _source, _rows in {
    "IDLE": {"PLANNING": start_is_true},
    "PLANNING": {"TOOL_CALL": names_a_tool},
    "TOOL_CALL": {"EVALUATING": tool_done, "RECOVERING": carries_error},
    "EVALUATING": {"PLANNING": not_solved, DONE: solved},
    "RECOVERING": {"PLANNING": recovered, FAILED: recovery_exhausted},
}.items():
    _nodes.guard_rows(_source, _rows)
GRAPH = _nodes.compile()


@agent(GRAPH, scripts=scripted.SCRIPTS)
class LifecycleAgent(EventWorkflow):
    """Works towards a goal through an event-driven guard table; events arrive as signals."""

    Input = LifecycleRequest
    EventModel = LifecycleEvent

    def on_event(self, state: AgentState, event: Any) -> dict[str, Any]:
        assert isinstance(state, LifecycleState)
        return on_event(state, event)

    def start(self, request: LifecycleRequest) -> LifecycleState:
        return LifecycleState(goal=request.goal)

    def initial_events(self, request: LifecycleRequest) -> list[dict[str, Any]]:
        # START -> IDLE is step 1, so the start event is addressed to step 1.
        return [{"step": 1, "start": True}] if request.start else []
