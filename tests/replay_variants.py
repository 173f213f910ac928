"""Variants of agents for the versioning and divergence tests (and the README's example).

``AccountV2`` is the worked example of changing a graph while runs are in flight
(docs/versioning.md): v2 adds a ``verify`` node that re-reads the account before
answering. Runs that started on v1 have no ``account-verify`` marker in their history,
so ``workflow.patched`` is False for them and they finish on the v1 graph; new runs
record the marker and take v2. ``AccountV2Unpatched`` is the same change made without
the patch: it breaks every in-flight run that reaches the answer. The patch's next two
steps: ``AccountV2Deprecated`` (``workflow.deprecate_patch``, once no v1 run is open: the
v1 path is gone, v2 runs replay) and ``AccountV2Final`` (the call removed, once no run
recorded by ``AccountV2`` is open).

``SetOrderAgent`` is deliberately non-deterministic: it calls two tools in the
order a Python ``set`` iterates them, which depends on the process's hash seed.
The sandbox does not catch it; replay in another process does.
"""

from __future__ import annotations

import re

from temporalio import workflow

from activities.tools import TOOLS
from tower import DONE, FAILED, AgentState, Graph, Message, NodeContext
from tower.temporal._runtime import AgentWorkflow
from workflows.account import GRAPH as GRAPH_V1
from workflows.account import (
    MAX_REASON_ROUNDS,
    REASON_PROMPT,
    AccountRequest,
    AccountState,
    error,
    has_answer,
    lookup_account,
    reason,
)

PATCH = "account-verify"


async def verify(ctx: NodeContext, state: AccountState) -> dict[str, object]:
    """v2: re-read the account the answer is about, so it never quotes a stale status."""
    found = re.search(r"ACC-\d{4}", state.answer)
    if found is None:
        return {}
    result = await ctx.tool(TOOLS["lookup_account"], {"account_id": found.group()})
    status = (result.get("account") or {}).get("status", "unknown")
    return {"messages": [Message(role="tool", name="lookup_account",
                                 content=f"verified: {found.group()} is {status}")]}


def after_reason_v2(state: AccountState) -> str:
    return "lookup_account" if state.pending_call else "verify"


GRAPH_V2 = (
    Graph("account", AccountState)
    .node("reason", reason, prompt=REASON_PROMPT, tools=[TOOLS["lookup_account"]])
    .node("lookup_account", lookup_account, tools=[TOOLS["lookup_account"]])
    .node("verify", verify, tools=[TOOLS["lookup_account"]])
    .node("error", error)
    .entry("reason")
    .route("reason", after_reason_v2, {"lookup_account": "tool call", "verify": "final answer"},
           guards={"verify": has_answer})
    .edge("lookup_account", "reason")
    .edge("verify", DONE)
    .edge("error", FAILED)
    .budget(escalate_to="error", max_visits={"reason": MAX_REASON_ROUNDS})
    .compile()
)


@workflow.defn(name="account")
class AccountV2(AgentWorkflow):
    """The safe change: v2 for new runs, v1 for runs already in flight."""

    machine = GRAPH_V2
    Input = AccountRequest

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        # Decide once, before the first command: a run without the marker in its
        # history started on v1 and must finish on v1.
        if not workflow.patched(PATCH):
            self.machine = GRAPH_V1  # type: ignore[misc]
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)


@workflow.defn(name="account")
class AccountV2Deprecated(AgentWorkflow):
    """Step two: no v1 run is open, so the v1 branch goes; the marker stays, deprecated."""

    machine = GRAPH_V2
    Input = AccountRequest

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        workflow.deprecate_patch(PATCH)
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)


@workflow.defn(name="account")
class AccountV2Final(AgentWorkflow):
    """Step three: no run recorded with ``patched`` is open, so the call goes too. (The
    same code as ``AccountV2Unpatched``: what made that one unsafe was the runs open.)"""

    machine = GRAPH_V2
    Input = AccountRequest

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)


@workflow.defn(name="account")
class AccountV2Unpatched(AgentWorkflow):
    """The unsafe change: the new graph for every run, old ones included."""

    machine = GRAPH_V2
    Input = AccountRequest

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)


async def lookup_both(ctx: NodeContext, state: AgentState) -> dict[str, object]:
    """BUG on purpose: a set's iteration order is not part of the history."""
    args = {"lookup_account": {"account_id": "ACC-1001"},
            "lookup_invoice": {"invoice_id": "INV-2001"}}
    for name in {"lookup_account", "lookup_invoice"}:
        await ctx.tool(TOOLS[name], args[name])
    return {}


SET_ORDER = (
    Graph("set-order", AgentState)
    .node("lookup", lookup_both, tools=[TOOLS["lookup_account"], TOOLS["lookup_invoice"]])
    .entry("lookup")
    .edge("lookup", DONE)
    .compile()
)


@workflow.defn(name="set-order")
class SetOrderAgent(AgentWorkflow):
    machine = SET_ORDER
    Input = AccountRequest

    @workflow.run
    async def run(self, request: AccountRequest) -> AgentState:
        return await self.drive(AgentState())
