"""An agent whose scripted model answer raises (a bug in the project's script), in a plain
module: the workflow sandbox imports it again."""

from __future__ import annotations

from temporalio import workflow

from tower import FAILED, AgentWorkflow, Graph, Message, agent
from tower.contract.wire import ModelRequest
from workflows.account import GRAPH, AccountRequest, AccountState

with workflow.unsafe.imports_passed_through():
    from activities.tools import TOOLS


def broken_script(request: ModelRequest) -> str:
    raise KeyError("invoice")  # the bug: a script reading what the request does not hold


BROKEN = (Graph("broken_script", AccountState)
          .node("reason", GRAPH.nodes["reason"].fn, prompt=GRAPH.nodes["reason"].prompt,
                tools=[TOOLS["lookup_account"]])
          .node("lookup_account", GRAPH.nodes["lookup_account"].fn, tools=[TOOLS["lookup_account"]])
          .node("error", GRAPH.nodes["error"].fn)
          .entry("reason")
          .route("reason", GRAPH.transitions["reason"].route,  # type: ignore[arg-type]
                 GRAPH.transitions["reason"].targets, guards=GRAPH.transitions["reason"].guards)
          .edge("lookup_account", "reason").edge("error", FAILED)
          .budget(escalate_to="error", max_visits={"reason": 5})
          .compile())


@agent(BROKEN, scripts={"reason": broken_script})
class BrokenScript(AgentWorkflow):
    """The account agent's nodes, with a script that raises."""

    @workflow.run
    async def run(self, request: AccountRequest) -> AccountState:
        state = AccountState(messages=[Message(role="user", content=request.question)])
        return await self.drive(state)
