"""account — a bounded ReAct loop.

START → reason ⇄ lookup_account → reason → DONE; the loop budget escalates to
``error``, which ends the run FAILED ("loop budget exceeded"), never an endless loop.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from activities.scripted import account as scripted
from activities.tools import accounts
from tower import (
    DONE,
    FAILED,
    AgentState,
    AgentWorkflow,
    Graph,
    Message,
    NodeContext,
    ToolCallRequest,
    agent,
)

MAX_REASON_ROUNDS = 5


class AccountRequest(BaseModel):
    # Unknown fields are refused, not ignored: a start can't smuggle settings in.
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=2000, examples=["Check my account ACC-1001"])


class AccountState(AgentState):
    pending_call: ToolCallRequest | None = None
    answer: str = ""


class FinalAnswer(BaseModel):
    answer: str = Field(min_length=1)


REASON_PROMPT = (
    "You answer questions about a customer's account. Call lookup_account to read the "
    "account; when you know the answer, reply with JSON {\"answer\": \"...\"}."
)


async def reason(ctx: NodeContext, state: AccountState) -> dict[str, object]:
    """Ask the model: call a tool, or finalize with the answer."""
    answer = await ctx.ask(state.messages, schema=FinalAnswer)
    if answer.tool_calls:
        call = answer.tool_calls[0]
        note = f"calling {call.name} {json.dumps(call.arguments)}"
        return {"pending_call": call, "messages": [Message(role="assistant", content=note)]}
    assert answer.parsed is not None
    text = answer.parsed.answer
    return {"answer": text, "messages": [Message(role="assistant", content=text)]}


async def lookup_account(ctx: NodeContext, state: AccountState) -> dict[str, object]:
    """Read the account the model asked for."""
    assert state.pending_call is not None
    call = state.pending_call
    # To the run's live stream only (docs/streaming.md): watchers see what is being read.
    ctx.emit("progress", {"reading": call.name, "arguments": call.arguments})
    result = await ctx.tool(call)
    reply = Message(role="tool", name=call.name, content=json.dumps(result, sort_keys=True))
    return {"pending_call": None, "messages": [reply]}


async def error(ctx: NodeContext, state: AccountState) -> dict[str, object]:
    """The loop budget ran out: tell the user plainly and stop."""
    text = "Sorry, I could not work this out; a human will follow up."
    return {"answer": text, "messages": [Message(role="assistant", content=text)]}


def after_reason(state: AccountState) -> str:
    return "lookup_account" if state.pending_call else DONE


def has_answer(state: AccountState) -> bool:
    return bool(state.answer)


GRAPH = (
    Graph("account", AccountState)
    .node("reason", reason, prompt=REASON_PROMPT, tools=[accounts.lookup_account])
    .node("lookup_account", lookup_account, tools=[accounts.lookup_account])
    .node("error", error)
    .entry("reason")
    .route("reason", after_reason, {"lookup_account": "tool call", DONE: "final answer"},
           guards={DONE: has_answer})
    .edge("lookup_account", "reason")
    .edge("error", FAILED)
    .budget(escalate_to="error", max_visits={"reason": MAX_REASON_ROUNDS})
    .compile()
)


@agent(GRAPH, scripts=scripted.SCRIPTS)
class AccountAgent(AgentWorkflow):
    """Answers questions about a customer's account with a bounded tool loop."""

    Input = AccountRequest

    def start(self, request: AccountRequest) -> AccountState:
        return AccountState(messages=[Message(role="user", content=request.question)])
