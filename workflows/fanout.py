"""fanout — map-reduce over child agents.

research_all → report → DONE. ``research_all`` starts one ``company`` child per
item, waits for all, and its update is merged by the state's reducers (profiles:
dict merge; skipped: append). A failed child follows the request's policy.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from tower import (
    APPEND,
    DONE,
    AgentState,
    AgentWorkflow,
    FanOutPolicy,
    Graph,
    NodeContext,
    agent,
    custom,
    fan_out,
)
from workflows.company import CompanyAgent, CompanyRequest, CompanyState

Company = Annotated[str, Field(min_length=1, max_length=100)]
MERGE = custom(lambda old, new: {**old, **new}, "merge")


class FanOutRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    companies: list[Company] = Field(min_length=1, max_length=50,
                                     examples=[["Acme", "Globex", "Initech"]])
    policy: FanOutPolicy = Field(default_factory=FanOutPolicy)


class FanOutState(AgentState):
    companies: list[str] = Field(default_factory=list)
    policy: FanOutPolicy = Field(default_factory=FanOutPolicy)
    profiles: Annotated[dict[str, str], MERGE] = Field(default_factory=dict)
    skipped: Annotated[list[str], APPEND] = Field(default_factory=list)
    report: str = ""


def _child_failed(result: CompanyState) -> str | None:
    if result.status == "FAILED":
        return result.errors[-1] if result.errors else "child ended FAILED"
    return None


async def research_all(ctx: NodeContext, state: FanOutState) -> dict[str, Any]:
    """Map: one company child per item; reduce: the reducers merge what comes back."""
    outcomes = await fan_out(
        ctx, CompanyAgent.run, state.companies,
        lambda company, attempt: CompanyRequest(company=company, attempt=attempt),
        policy=state.policy, failed=_child_failed)
    return {
        "profiles": {o.item: o.result.profile for o in outcomes if o.result is not None},
        "skipped": [f"{o.item}: {o.reason}" for o in outcomes if not o.ok],
    }


async def report(ctx: NodeContext, state: FanOutState) -> dict[str, Any]:
    """Code, not the model: one line per company, in the order asked."""
    lines = [f"- {c}: {state.profiles[c]}" for c in state.companies if c in state.profiles]
    head = f"{len(state.profiles)} of {len(state.companies)} companies profiled"
    if state.skipped:
        head += f"; skipped: {', '.join(s.split(':', 1)[0] for s in state.skipped)}"
    return {"report": "\n".join([head, *lines])}


GRAPH = (
    Graph("fanout", FanOutState)
    .node("research_all", research_all)
    .node("report", report)
    .entry("research_all")
    .edge("research_all", "report")
    .edge("report", DONE)
    .compile()
)


@agent(GRAPH)
class FanOutAgent(AgentWorkflow):
    """Profiles several companies at once, one child agent each."""

    Input = FanOutRequest

    def start(self, request: FanOutRequest) -> FanOutState:
        return FanOutState(companies=list(request.companies), policy=request.policy)
