"""The account agent's graph under other names, in a plain module (the workflow sandbox
imports it again): one whose lookup node emits nothing (to compare histories with the
account agent, whose node emits), one that streams each step's update."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

from tower import FAILED, AgentWorkflow, Graph, Message, NodeContext, agent
from workflows.account import GRAPH, AccountRequest, AccountState

with workflow.unsafe.imports_passed_through():
    from activities.scripted import account as scripted
    from activities.tools import TOOLS


async def quiet_lookup(ctx: NodeContext, state: AccountState) -> dict[str, object]:
    """The account agent's lookup node as it was before it emitted its progress."""
    assert state.pending_call is not None
    call = state.pending_call
    result = await ctx.tool(call)
    reply = Message(role="tool", name=call.name, content=json.dumps(result, sort_keys=True))
    return {"pending_call": None, "messages": [reply]}


def account_graph(name: str, lookup: Any) -> Any:
    reason = GRAPH.nodes["reason"]
    route = GRAPH.transitions["reason"]
    return (Graph(name, AccountState)
            .node("reason", reason.fn, prompt=reason.prompt, tools=[TOOLS["lookup_account"]])
            .node("lookup_account", lookup, tools=[TOOLS["lookup_account"]])
            .node("error", GRAPH.nodes["error"].fn)
            .entry("reason")
            .route("reason", route.route, route.targets,  # type: ignore[arg-type]
                   guards=route.guards)
            .edge("lookup_account", "reason").edge("error", FAILED)
            .budget(escalate_to="error", max_visits={"reason": 5})
            .compile())


@agent(account_graph("quiet_account", quiet_lookup), scripts=scripted.SCRIPTS)
class QuietAccount(AgentWorkflow):
    """The account agent without ``ctx.emit``."""

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)


@agent(account_graph("account_updates", GRAPH.nodes["lookup_account"].fn),
       scripts=scripted.SCRIPTS)
class AccountUpdates(AgentWorkflow):
    """The account agent, each transition event carrying its update."""

    stream_updates = True

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)
