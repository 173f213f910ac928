"""onboarding — per-state tools, a developer-controlled exit check, a backward edge.

collect_info → validate → provision → DONE; validate → collect_info when a check
fails, a cycle bounded by the budget (past it, ``give_up`` ends the run FAILED).
``collect_info`` has no tools and leaves only when code sees name, e-mail and company;
``validate`` sees only the two checks and leaves forward only when both said yes for
exactly the collected values; ``provision`` sees only the two provisioning tools and
calls each at most once (and each is idempotent by key in the tools' database).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import onboarding as scripted
from activities.tools import onboarding
from tower import (
    APPEND,
    DONE,
    FAILED,
    AgentState,
    AgentWorkflow,
    Graph,
    Message,
    NodeContext,
    NodeFailed,
    agent,
)

MAX_COLLECT_ROUNDS = 3
MAX_TOOL_ROUNDS = 4
CHECKS = ("validate_email", "check_company")


class OnboardingRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=4000, examples=[
        "Hi, I am Ada Lovelace from Analytical Engines, e-mail ada@engines.io"])


class ContactInfo(BaseModel):
    """What collect_info must produce; a missing field is null, never invented."""

    name: str | None = Field(default=None, max_length=200)
    email: str | None = Field(default=None, max_length=254)
    company: str | None = Field(default=None, max_length=200)

    def missing(self) -> list[str]:
        return [f for f in ("name", "email", "company") if not (getattr(self, f) or "").strip()]


class OnboardingState(AgentState):
    contact: ContactInfo = Field(default_factory=ContactInfo)
    # Result of each check for the contact as collected now; cleared when it changes.
    checks: dict[str, bool] = Field(default_factory=dict)
    rejected: Annotated[list[str], APPEND] = Field(default_factory=list)
    account_id: str = ""
    welcome_message_id: str = ""
    provisioned: Annotated[list[str], APPEND] = Field(default_factory=list)


COLLECT_PROMPT = (
    "Extract the new customer's name, e-mail and company from the conversation. Reply with "
    "JSON {\"name\": ..., \"email\": ..., \"company\": ...}; use null for anything not given, "
    "and never reuse an e-mail or company that was rejected."
)
VALIDATE_PROMPT = (
    "Check the customer's details: call validate_email with the e-mail and check_company "
    "with the company, then summarise the results in one sentence."
)
PROVISION_PROMPT = (
    "Provision the customer: call create_account once, then send_welcome_email once with the "
    "new account id, then confirm in one sentence."
)


async def collect_info(ctx: NodeContext, state: OnboardingState) -> dict[str, Any]:
    """The model extracts the details; code decides whether they are complete."""
    answer = await ctx.ask(state.messages, schema=ContactInfo)
    assert answer.parsed is not None
    contact = answer.parsed
    note = Message(role="assistant", content=contact.model_dump_json())
    update: dict[str, Any] = {"contact": contact, "checks": {}, "messages": [note]}
    if contact.missing():
        update["messages"].append(Message(
            role="user", content=f"Still missing: {', '.join(contact.missing())}."))
    return update


async def validate(ctx: NodeContext, state: OnboardingState) -> dict[str, Any]:
    """The model runs the checks; only results for the collected values count."""
    c = state.contact
    expected = {"validate_email": {"email": c.email}, "check_company": {"company": c.company}}
    convo = [Message(role="user", content=f"Validate: name: {c.name}; email: {c.email}; "
                                          f"company: {c.company}")]
    results = await _tool_rounds(ctx, convo)
    checks = {name: bool(results.get(name, {}).get("valid"))
              and results[name].get("args") == expected[name] for name in CHECKS}
    update: dict[str, Any] = {"checks": checks}
    failed = [n for n in CHECKS if not checks[n]]
    if failed:
        reasons = [f"{n}: {results[n].get('reason', '?')} ({_value(results[n])})"
                   if n in results else f"{n}: not run for the collected value" for n in failed]
        update["rejected"] = [_value(results[n]) for n in failed if n in results]
        update["messages"] = [Message(role="user", content="Rejected — " + "; ".join(reasons)
                                      + ". Please use other details.")]
    return update


async def provision(ctx: NodeContext, state: OnboardingState) -> dict[str, Any]:
    """The model drives the two provisioning tools; code lets each act only once."""
    c = state.contact
    convo = [Message(role="user", content=f"Provision: name: {c.name}; email: {c.email}; "
                                          f"company: {c.company}")]
    results = await _tool_rounds(ctx, convo, once=True)
    reply = convo[-1].content if convo[-1].role == "assistant" else ""
    return {
        "account_id": results.get("create_account", {}).get("account_id", ""),
        "welcome_message_id": results.get("send_welcome_email", {}).get("message_id", ""),
        "provisioned": list(results),
        "messages": [Message(role="assistant", content=reply)] if reply else [],
    }


async def give_up(ctx: NodeContext, state: OnboardingState) -> dict[str, Any]:
    """The collect/validate cycle ran out of budget: stop, saying why."""
    why = f"could not collect valid details after {MAX_COLLECT_ROUNDS} rounds"
    return {"errors": [why], "messages": [Message(role="assistant", content=f"Sorry, I {why}; "
                                                  "a human will follow up.")]}


async def _tool_rounds(
    ctx: NodeContext, convo: list[Message], *, once: bool = False
) -> dict[str, dict[str, Any]]:
    """Let the model call this node's tools until it answers in text.

    Returns the last result per tool, with the arguments it ran with under "args".
    With ``once``, a tool the model calls again is not run again: its first result
    is handed back, so a confused model cannot provision twice.
    """
    results: dict[str, dict[str, Any]] = {}
    for _ in range(MAX_TOOL_ROUNDS):
        answer = await ctx.ask(convo)
        if not answer.tool_calls:
            convo.append(Message(role="assistant", content=answer.text or ""))
            return results
        for call in answer.tool_calls:
            if once and call.name in results:
                result = {**results[call.name], "note": "already done; not repeated"}
            else:
                result = await ctx.tool(call)
                results[call.name] = {**result, "args": call.arguments}
            convo.append(Message(role="tool", name=call.name,
                                 content=json.dumps(result, sort_keys=True)))
    raise NodeFailed(f"{ctx.node.name}: no answer after {MAX_TOOL_ROUNDS} tool rounds")


def _value(result: dict[str, Any]) -> str:
    return str(next(iter(result.get("args", {}).values()), "?"))


def details_complete(state: OnboardingState) -> bool:
    """The developer-controlled exit check of collect_info."""
    return not state.contact.missing()


def both_checks_passed(state: OnboardingState) -> bool:
    return all(state.checks.get(name) is True for name in CHECKS)


def provisioned_once(state: OnboardingState) -> bool:
    return bool(state.account_id and state.welcome_message_id)


def after_collect(state: OnboardingState) -> str:
    return "validate" if details_complete(state) else "collect_info"


def after_validate(state: OnboardingState) -> str:
    return "provision" if both_checks_passed(state) else "collect_info"


GRAPH = (
    Graph("onboarding", OnboardingState)
    .node("collect_info", collect_info, prompt=COLLECT_PROMPT)
    .node("validate", validate, prompt=VALIDATE_PROMPT,
          tools=[onboarding.validate_email, onboarding.check_company])
    .node("provision", provision, prompt=PROVISION_PROMPT,
          tools=[onboarding.create_account, onboarding.send_welcome_email],
          ungated="entered only when both validation checks passed; one account per e-mail "
          "and each tool once per run (their guards)")
    .node("give_up", give_up)
    .entry("collect_info")
    .route("collect_info", after_collect, {"validate": "complete", "collect_info": "missing"},
           guards={"validate": details_complete})
    .route("validate", after_validate, {"provision": "both valid", "collect_info": "rejected"},
           guards={"provision": both_checks_passed})
    .edge("provision", DONE, guard=provisioned_once)
    .edge("give_up", FAILED)
    .budget(escalate_to="give_up", max_visits={"collect_info": MAX_COLLECT_ROUNDS})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class OnboardingAgent(AgentWorkflow):
    """Collects, validates and provisions a new customer; each side effect exactly once."""

    Input = OnboardingRequest

    def start(self, request: OnboardingRequest) -> OnboardingState:
        return OnboardingState(messages=[Message(role="user", content=request.message)])
