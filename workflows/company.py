"""company — profile one company; the child agent the fanout agent maps over.

profile → DONE. Output that stays invalid after the corrections ends the run FAILED,
which is how a parent sees a failed child.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import company as scripted
from tower import DONE, AgentState, AgentWorkflow, Graph, Message, NodeContext, agent


class CompanyRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    company: str = Field(min_length=1, max_length=100, examples=["Acme"])
    attempt: int = Field(0, ge=0, le=10)  # which try of its parent's retry policy


class CompanyProfile(BaseModel):
    summary: str = Field(min_length=1, max_length=1000)


class CompanyState(AgentState):
    company: str = ""
    profile: str = ""


PROMPT = "Write a two-sentence profile of the company. Reply with JSON {\"summary\": \"...\"}."


async def profile(ctx: NodeContext, state: CompanyState) -> dict[str, object]:
    """Ask the model for a short profile."""
    answer = await ctx.ask(state.messages, schema=CompanyProfile)
    assert answer.parsed is not None
    return {"profile": answer.parsed.summary}


def has_profile(state: CompanyState) -> bool:
    return bool(state.profile)


GRAPH = (
    Graph("company", CompanyState)
    .node("profile", profile, prompt=PROMPT)
    .entry("profile")
    .edge("profile", DONE, guard=has_profile)
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class CompanyAgent(AgentWorkflow):
    """Profiles one company (a child of the fanout agent)."""

    Input = CompanyRequest

    def start(self, request: CompanyRequest) -> CompanyState:
        text = f"Profile the company {request.company} (attempt {request.attempt})."
        return CompanyState(company=request.company,
                            messages=[Message(role="user", content=text)])
