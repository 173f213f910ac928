"""Safety proven on the graph at compile time (tower/core/proofs.py): every cycle bounded,
every side effect behind a gate or declared ungated with a reason, ``require`` on paths.
Pure: milliseconds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from tower import DONE, FAILED, AgentState, Gate, Graph, tool
from tower.contract.failures import InvalidGraph


class Args(BaseModel):
    amount: int = 1


@tool(side_effect=True)
def pay(db: Any, args: Args) -> dict[str, Any]:
    """Pay."""
    return {}


@tool
def look(args: Args) -> dict[str, Any]:
    """Read."""
    return {}


async def noop(ctx: Any, state: AgentState) -> dict[str, Any]:
    return {}


def gate(**kw: Any) -> Gate:
    return Gate(name=kw.pop("name", "review"), role="manager", timeout=timedelta(hours=1),
                on_reject=kw.pop("on_reject", "decline"), on_timeout="decline", **kw)


def invalid(build: Any) -> str:
    with pytest.raises(InvalidGraph) as caught:
        build()
    return caught.value.problem


def three_node_cycle(**budget: Any) -> Graph:
    g = (Graph("loop3", AgentState).node("a", noop).node("b", noop).node("c", noop)
         .entry("a").edge("a", "b").edge("b", "c")
         .route("c", lambda s: DONE, ["a", DONE]))
    return g.budget(escalate_to=FAILED, **budget) if budget else g


def test_a_cycle_through_three_nodes_without_a_budget_fails_naming_it() -> None:
    problem = invalid(lambda: three_node_cycle().compile())
    assert problem.startswith("unbounded cycle a → b → c → a: give one of its nodes")
    # A token budget bounds spend, not the cycle.
    assert "unbounded cycle a → b → c → a" in invalid(
        lambda: three_node_cycle(max_tokens=1000).compile())


def test_a_visit_budget_on_any_node_or_max_steps_bounds_it() -> None:
    for budget in ({"max_visits": {"b": 3}}, {"max_visits": {"c": 1}}, {"max_steps": 20}):
        proof = three_node_cycle(**budget).compile().proof
        assert proof is not None and len(proof.loops) == 1, budget
        assert proof.loops[0].nodes == ("a", "b", "c")
    proof = three_node_cycle(max_visits={"b": 3}).compile().proof
    assert proof is not None
    assert proof.lines()[0] == "cycles through a, b, c: bounded by b ≤ 3 visits"


def test_every_cycle_needs_a_bound_not_just_one() -> None:
    # a ⇄ b is bounded by a's budget; b ⇄ c is not (it never passes a).
    def build() -> Any:
        return (Graph("two", AgentState).node("a", noop).node("b", noop).node("c", noop)
                .entry("a").edge("a", "b").route("b", lambda s: DONE, ["a", "c", DONE])
                .edge("c", "b").budget(escalate_to=FAILED, max_visits={"a": 2}).compile())
    assert invalid(build).startswith("unbounded cycle b → c → b")


def test_a_self_loop_and_a_cycle_through_a_gate_route_count() -> None:
    assert "unbounded cycle a → a" in invalid(lambda: (
        Graph("self", AgentState).node("a", noop).entry("a")
        .route("a", lambda s: DONE, ["a", DONE]).compile()))
    # on_stale goes back to plan: plan → act → plan is a cycle through the gate.
    assert "unbounded cycle act → plan → act" in invalid(lambda: (
        Graph("stale", AgentState).node("plan", noop).node("act", noop).node("decline", noop)
        .entry("plan").edge("plan", "act").edge("act", DONE).edge("decline", DONE)
        .gate("act", gate(recheck=lambda c, s: None, on_stale="plan")).compile()))


def test_declared_unbounded_with_a_reason_passes_and_says_why() -> None:
    m = (Graph("chatty", AgentState).node("listen", noop, unbounded="waits for the user")
         .node("respond", noop).entry("listen").route("listen", lambda s: DONE,
                                                      ["respond", DONE])
         .edge("respond", "listen").compile())
    assert m.proof is not None
    assert m.proof.lines()[0] == ("cycles through listen, respond: bounded by listen "
                                  "(unbounded: waits for the user)")
    assert "needs a reason" in invalid(lambda: Graph("x", AgentState).node("a", noop,
                                                                          unbounded=" "))
    assert "declares unbounded= but is on no cycle" in invalid(lambda: (
        Graph("x", AgentState).node("a", noop, unbounded="why").entry("a").edge("a", DONE)
        .compile()))


def pay_graph(*, gated: str | None = None, when: str = "before", **node: Any) -> Graph:
    g = (Graph("payer", AgentState)
         .node("plan", noop, tools=[look], proposes=[pay])
         .node("check", noop).node("pay", noop, tools=[pay], **node)
         .node("decline", noop)
         .entry("plan").route("plan", lambda s: "check", ["check", "decline"])
         .edge("check", "pay").edge("pay", DONE).edge("decline", DONE))
    return g.gate(gated, gate(when=when)) if gated else g


def test_an_ungated_side_effect_fails_with_its_path() -> None:
    problem = invalid(lambda: pay_graph().compile())
    assert problem.startswith("node 'pay' calls side-effecting pay on a path with no approval "
                              "gate: START → plan → check → pay.")
    # A gate after the node approves its update, not its effect.
    assert "START → plan → check → pay" in invalid(
        lambda: pay_graph(gated="pay", when="after").compile())


def test_a_gate_on_the_node_or_on_every_path_to_it_proves_it() -> None:
    for where in ("pay", "check", "plan"):
        proof = pay_graph(gated=where).compile().proof
        assert proof is not None and proof.lines()[-1] == "pay calls pay: behind gate review"


def test_a_gate_route_around_the_approval_is_a_path_without_it() -> None:
    # check's gate sends a rejection to pay: pay is reachable without the approval.
    def build() -> Any:
        return (Graph("leak", AgentState).node("check", noop)
                .node("pay", noop, tools=[pay]).node("decline", noop).entry("check")
                .edge("check", "pay").edge("pay", DONE).edge("decline", DONE)
                .gate("check", gate(on_reject="pay")).compile())
    assert "START → check → pay" in invalid(build)


def test_declared_ungated_with_a_reason() -> None:
    proof = pay_graph(ungated="pays at most one cent").compile().proof
    assert proof is not None
    assert proof.lines()[-1] == "pay calls pay: ungated — pays at most one cent"
    assert "needs a reason" in invalid(lambda: pay_graph(ungated=""))
    assert "declares ungated= but is behind a gate" in invalid(
        lambda: pay_graph(gated="pay", ungated="why").compile())
    assert "declares ungated= but calls no side-effecting tool" in invalid(lambda: (
        Graph("x", AgentState).node("a", noop, tools=[look], ungated="why")
        .entry("a").edge("a", DONE).compile()))


def test_a_proposed_tool_is_not_an_effect_of_the_planning_node() -> None:
    m = pay_graph(gated="pay").compile()
    assert m.nodes["plan"].proposes == ("pay",) and "pay" in m.nodes["plan"].specs
    assert m.proof is not None and [e.node for e in m.proof.effects] == ["pay"]


def test_require_after_a_gate_holds_or_fails_with_the_path() -> None:
    m = pay_graph(gated="check").require("pay", after="review").compile()
    assert m.proof is not None and m.proof.lines()[-1] == "pay only after gate review: holds"

    def bypass() -> Any:  # plan may go straight to pay, around check's gate
        return (Graph("bypass", AgentState).node("plan", noop)
                .node("check", noop).node("pay", noop, tools=[pay], ungated="tiny")
                .node("decline", noop).entry("plan")
                .route("plan", lambda s: "check", ["check", "pay"])
                .edge("check", "pay").edge("pay", DONE).edge("decline", DONE)
                .gate("check", gate()).require("pay", after="review").compile())
    assert invalid(bypass) == ("node 'pay' must come after gate 'review', but the path "
                               "START → plan → pay does not pass it")
    assert "after unknown gate 'nope'" in invalid(
        lambda: pay_graph(gated="pay").require("pay", after="nope").compile())
