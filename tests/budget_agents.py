"""An agent for the cost tests, in a plain module: the workflow sandbox imports it again,
and a pytest-rewritten test module is a poor thing to import there."""

from __future__ import annotations

from temporalio import workflow

from activities.tools import TOOLS
from tower import FAILED, AgentWorkflow, Graph, Message
from workflows.account import GRAPH, AccountAgent, AccountRequest, AccountState

# The account agent's own nodes under a token budget far too small for one answer.
TIGHT = (Graph("account", AccountState)
         .node("reason", GRAPH.nodes["reason"].fn, prompt=GRAPH.nodes["reason"].prompt,
               tools=[TOOLS["lookup_account"]])
         .node("lookup_account", GRAPH.nodes["lookup_account"].fn, tools=[TOOLS["lookup_account"]])
         .node("error", GRAPH.nodes["error"].fn)
         .entry("reason")
         .route("reason", GRAPH.transitions["reason"].route,  # type: ignore[arg-type]
                GRAPH.transitions["reason"].targets, guards=GRAPH.transitions["reason"].guards)
         .edge("lookup_account", "reason").edge("error", FAILED)
         .budget(escalate_to="error", max_tokens=20, max_visits={"reason": 5})
         .compile())


@workflow.defn(name="account_tight_budget")
class TightAccount(AccountAgent):
    """A plain Temporal subclass (not an ``@agent``): it declares its own init, as the SDK
    asks of a class whose run takes other parameters than its base's init."""

    machine = TIGHT

    @workflow.init
    def __init__(self, request: AccountRequest) -> None:
        AgentWorkflow.__init__(self)

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)
