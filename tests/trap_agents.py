"""The refund agent with its gate's edit rule written as the trap in issue 31 reads: "the
new amount is at most the state's amount", and no declared limits. In a plain module: the
workflow sandbox imports it again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from temporalio import workflow

from tower import Graph, agent
from workflows.refund import GRAPH, RefundAgent, RefundRequest, RefundState

with workflow.unsafe.imports_passed_through():
    from activities.scripted import refund as scripted


def at_most_the_amount(planned: RefundState, edits: Mapping[str, Any]) -> str | None:
    if edits.get("amount_cents", planned.amount_cents) > planned.amount_cents:
        return "the amount may only go down"
    return None


def _trap_graph() -> Any:
    g = Graph("refund_trap", RefundState)
    for node in GRAPH.nodes.values():
        g.node(node.name, node.fn, prompt=node.prompt,
               tools=[node.specs.get(n, n) for n in node.tools],  # type: ignore[misc]
               proposes=[node.specs.get(n, n) for n in node.proposes],  # type: ignore[misc]
               ungated=node.ungated,
               unbounded=node.unbounded)
    g.entry(GRAPH.entry)
    for source, out in GRAPH.transitions.items():
        if out.route is not None:
            g.route(source, out.route, out.labels or out.targets, guards=out.guards)
        else:
            g.edge(source, out.targets[0], guard=out.guards.get(out.targets[0]))
    for gated, gate in GRAPH.gates.items():
        g.gate(gated, replace(gate, check_edits=at_most_the_amount, limits=None))
    assert GRAPH.budget is not None
    g.budget(escalate_to=GRAPH.budget.escalate_to, max_visits=GRAPH.budget.max_visits)
    return g.compile()


TRAP = _trap_graph()


@agent(TRAP, scripts=scripted.SCRIPTS)
class TrapRefund(RefundAgent):
    """The refund agent, its edit rule as the trap reads."""

    @workflow.run
    async def run(self, request: RefundRequest) -> RefundState:
        return await super().run(request)
