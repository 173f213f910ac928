"""support — classify, then route in code.

classify → billing | technical | account_help → DONE. ``classify`` has no tools and
must output one category (a validated enum); the route is code reading that field.
Each handler has its own prompt and tools, and cannot call another handler's tools.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import support as scripted
from activities.tools import accounts, billing, helpdesk
from tower import (
    APPEND,
    DONE,
    AgentState,
    AgentWorkflow,
    Answer,
    EffectRefused,
    Graph,
    Message,
    NodeContext,
    NodeFailed,
    agent,
)

MAX_TOOL_ROUNDS = 4


class Category(StrEnum):
    BILLING = "BILLING"
    TECHNICAL = "TECHNICAL"
    ACCOUNT = "ACCOUNT"


class SupportRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=4000,
                         examples=["I was charged twice on invoice INV-2001"])


class Classification(BaseModel):
    category: Category


class SupportState(AgentState):
    category: Category | None = None
    reply: str = ""
    tools_used: Annotated[list[str], APPEND] = Field(default_factory=list)


CLASSIFY_PROMPT = (
    "Classify the customer's message. Reply with JSON {\"category\": ...} where category "
    "is exactly one of BILLING, TECHNICAL, ACCOUNT."
)
BILLING_PROMPT = "You are the billing desk. Look up invoices; refund only what is owed."
TECHNICAL_PROMPT = "You are technical support. Search the docs first; open a ticket if needed."
ACCOUNT_PROMPT = "You are the account desk. Look up or update the customer's account."


async def classify(ctx: NodeContext, state: SupportState) -> dict[str, object]:
    """One category, validated against the enum; no tools."""
    answer = await ctx.ask(state.messages, schema=Classification)
    assert answer.parsed is not None
    return {"category": answer.parsed.category}


async def handle(ctx: NodeContext, state: SupportState) -> dict[str, object]:
    """A handler: the model may use this desk's tools for a few rounds, then replies."""
    convo = list(state.messages)
    used: list[str] = []
    for _ in range(MAX_TOOL_ROUNDS):
        answer: Answer[BaseModel] = await ctx.ask(convo)
        if not answer.tool_calls:
            assert answer.text is not None
            reply = Message(role="assistant", content=answer.text)
            new_messages = [*convo[len(state.messages):], reply]
            return {"reply": answer.text, "tools_used": used, "messages": new_messages}
        for call in answer.tool_calls:
            try:
                result = await ctx.tool(call)
            except EffectRefused as exc:  # an invariant held: tell the model, pay nothing
                result = {"refused": exc.reason}
            used.append(call.name)
            convo.append(Message(role="tool", name=call.name,
                                 content=json.dumps(result, sort_keys=True)))
    raise NodeFailed(f"{ctx.node.name}: no reply after {MAX_TOOL_ROUNDS} tool rounds")


def by_category(state: SupportState) -> str:
    return {Category.BILLING: "billing", Category.TECHNICAL: "technical",
            Category.ACCOUNT: "account_help"}[state.category or Category.ACCOUNT]


GRAPH = (
    Graph("support", SupportState)
    .node("classify", classify, prompt=CLASSIFY_PROMPT)
    .node("billing", handle, prompt=BILLING_PROMPT,
          tools=[billing.lookup_invoice, billing.issue_refund],
          ungated="issue_refund's own guard refuses any amount over the tenant's limit "
          "without a recorded approval, in the refund's transaction")
    .node("technical", handle, prompt=TECHNICAL_PROMPT,
          tools=[helpdesk.search_docs, helpdesk.create_ticket],
          ungated="a ticket is an internal note for the support team, made once per call")
    .node("account_help", handle, prompt=ACCOUNT_PROMPT,
          tools=[accounts.lookup_account, accounts.update_account],
          ungated="changes only an account's plan or e-mail, as the customer asks; the same "
          "tool changes them back")
    .entry("classify")
    .route("classify", by_category,
           {"billing": "BILLING", "technical": "TECHNICAL", "account_help": "ACCOUNT"})
    .edge("billing", DONE)
    .edge("technical", DONE)
    .edge("account_help", DONE)
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class SupportAgent(AgentWorkflow):
    """Routes a support message to the right desk, decided in code from a validated category."""

    Input = SupportRequest

    def start(self, request: SupportRequest) -> SupportState:
        return SupportState(messages=[Message(role="user", content=request.message)])
