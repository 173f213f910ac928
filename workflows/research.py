"""research — three ways to decide when a state is done.

research → draft → DONE; each state loops on itself until its exit is allowed, and
the budget bounds every loop (past it, ``give_up`` ends the run FAILED). The run's
input picks who decides that a state is done:

- ``model``: the model calls ``advance_to_next_step`` (with a summary) when it judges
  the step complete, and the run moves on, whatever the step produced;
- ``developer``: code alone decides — at least two sources, at least 100 words — and
  any signal from the model is ignored;
- ``hybrid`` (the default): the model signals readiness and code checks it; a signal
  the check refuses keeps the run in the state, with the reason fed back.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import research as scripted
from activities.tools import research as research_tools
from tower import (
    APPEND,
    DONE,
    FAILED,
    AgentState,
    AgentWorkflow,
    Graph,
    Message,
    NodeContext,
    agent,
    custom,
)

MIN_SOURCES = 2
MIN_WORDS = 100
MAX_TURNS = 5  # per state
ADVANCE = research_tools.advance_to_next_step.name


class Control(StrEnum):
    MODEL = "model"
    DEVELOPER = "developer"
    HYBRID = "hybrid"


class ResearchRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=3, max_length=300,
                       examples=["durable execution for LLM agents"])
    control: Control = Control.HYBRID


class Source(BaseModel):
    id: str
    title: str
    url: str
    summary: str


def _merge_sources(old: list[Source], new: list[Source]) -> list[Source]:
    """Append sources not seen before: finding one twice is not progress."""
    merged = list(old)
    for source in new:
        if all(source.id != s.id for s in merged):
            merged.append(source)
    return merged


class ResearchState(AgentState):
    topic: str
    control: Control = Control.HYBRID
    sources: Annotated[list[Source], custom(_merge_sources, "merge_sources")] = Field(
        default_factory=list)
    signalled: bool = False  # the model called advance_to_next_step in the last turn
    research_summary: str = ""
    draft: str = ""
    draft_summary: str = ""
    feedback: str = ""  # code's word on the last turn, shown to the model on the next
    held: Annotated[list[str], APPEND] = Field(default_factory=list)  # every "stay" of code


def may_leave(control: Control, signalled: bool, check_ok: bool) -> bool:
    """The whole difference between the three transition-control models."""
    if control is Control.MODEL:
        return signalled
    if control is Control.DEVELOPER:
        return check_ok
    return signalled and check_ok


def research_done(state: ResearchState) -> bool:
    return may_leave(state.control, state.signalled, len(state.sources) >= MIN_SOURCES)


def draft_done(state: ResearchState) -> bool:
    return may_leave(state.control, state.signalled, word_count(state.draft) >= MIN_WORDS)


def word_count(text: str) -> int:
    return len(text.split())


def _held(control: Control, signalled: bool, check_ok: bool, shortfall: str) -> str | None:
    """Why code keeps the run here, when it is code that says so (else None)."""
    if check_ok or control is Control.MODEL or (control is Control.HYBRID and not signalled):
        return None
    ignored = " (the model's signal is ignored: code decides)" if (
        signalled and control is Control.DEVELOPER) else ""
    return f"Not yet: {shortfall}{ignored}."


RESEARCH_PROMPT = (
    "Gather sources on the topic with search_sources (one source per page; ask for the next "
    f"page to find more). When you judge the research complete, call {ADVANCE} with a summary."
)
DRAFT_PROMPT = (
    "Write a short article on the topic from the sources: reply with the full text of the "
    f"draft. When you judge the draft complete, call {ADVANCE} with a summary."
)


async def research(ctx: NodeContext, state: ResearchState) -> dict[str, Any]:
    """One research turn: the model searches, or signals that research is complete."""
    found = "; ".join(f"{s.id} {s.title}" for s in state.sources) or "none"
    text = (f"Topic: {state.topic}\nSources gathered: {len(state.sources)} ({found})\n"
            f"Next page: {len(state.sources) + 1}")
    answer = await ctx.ask(_with_feedback(text, state))
    new: list[Source] = []
    update: dict[str, Any] = {"signalled": False}
    for call in answer.tool_calls:
        if call.name == ADVANCE:
            update |= {"signalled": True, "research_summary": call.arguments["summary"]}
        else:
            result = await ctx.tool(call)
            new += [Source.model_validate(r) for r in result.get("results", [])]
    update["sources"] = new
    count = len(_merge_sources(state.sources, new))
    held = _held(state.control, update["signalled"], count >= MIN_SOURCES,
                 f"{count} of {MIN_SOURCES} sources")
    return update | {"feedback": held or ""} | ({"held": [held]} if held else {})


async def draft(ctx: NodeContext, state: ResearchState) -> dict[str, Any]:
    """One drafting turn: the model writes the draft, or signals that it is complete."""
    sources = "\n".join(f"- {s.title}: {s.summary}" for s in state.sources)
    text = (f"Topic: {state.topic}\nSources:\n{sources}\n"
            f"Current draft ({word_count(state.draft)} words):\n{state.draft or '(none)'}")
    answer = await ctx.ask(_with_feedback(text, state))
    update: dict[str, Any] = {"signalled": False}
    calls = [c for c in answer.tool_calls if c.name == ADVANCE]
    if calls:
        update |= {"signalled": True, "draft_summary": calls[0].arguments["summary"]}
    elif answer.text:
        update |= {"draft": answer.text, "messages": [Message(role="assistant",
                                                              content=answer.text)]}
    words = word_count(update.get("draft", state.draft))
    held = _held(state.control, update["signalled"], words >= MIN_WORDS,
                 f"{words} of {MIN_WORDS} words")
    return update | {"feedback": held or ""} | ({"held": [held]} if held else {})


async def give_up(ctx: NodeContext, state: ResearchState) -> dict[str, Any]:
    """A state ran out of turns: stop, saying where."""
    return {"errors": [f"no usable result within {MAX_TURNS} turns per state"]}


def _with_feedback(text: str, state: ResearchState) -> list[Message]:
    # Only what this turn needs (topic, progress, code's last word), never the whole run.
    return [Message(role="user", content=f"{text}\n{state.feedback}".rstrip())]


def after_research(state: ResearchState) -> str:
    return "draft" if research_done(state) else "research"


def after_draft(state: ResearchState) -> str:
    return DONE if draft_done(state) else "draft"


GRAPH = (
    Graph("research", ResearchState)
    .node("research", research, prompt=RESEARCH_PROMPT, tools=[research_tools.search_sources,
                                                            research_tools.advance_to_next_step])
    .node("draft", draft, prompt=DRAFT_PROMPT, tools=[research_tools.advance_to_next_step])
    .node("give_up", give_up)
    .entry("research")
    .route("research", after_research, {"draft": "exit allowed", "research": "stay"},
           guards={"draft": research_done})
    .route("draft", after_draft, {DONE: "exit allowed", "draft": "stay"},
           guards={DONE: draft_done})
    .edge("give_up", FAILED)
    .budget(escalate_to="give_up", max_visits={"research": MAX_TURNS, "draft": MAX_TURNS})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class ResearchAgent(AgentWorkflow):
    """Researches a topic and drafts an article; who ends each step is chosen per run."""

    Input = ResearchRequest

    def start(self, request: ResearchRequest) -> ResearchState:
        return ResearchState(topic=request.topic, control=request.control, messages=[
            Message(role="user", content=f"Research and draft: {request.topic}")])
