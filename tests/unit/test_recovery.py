"""Recovery paths and operator decisions in the pure engine: no server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tower import DONE, FAILED, AgentState, Graph
from tower.contract.failures import InvalidGraph
from tower.core.engine import advance, node_error, start
from tower.core.pictures import to_mermaid
from tower.core.state import Status, UpdateError, apply_update

AT = datetime(2026, 1, 1, tzinfo=UTC)


async def noop(ctx: object, state: object) -> dict[str, object]:
    return {}


def back_to_failed_node(state: AgentState) -> str:
    return state.last_error.node if state.last_error else FAILED


def machine(recover_limit: int = 2, nodes: tuple[str, ...] | None = None):
    return (
        Graph("m", AgentState)
        .node("a", noop).node("b", noop).node("fix", noop)
        .entry("a").edge("a", "b").edge("b", DONE)
        .route("fix", back_to_failed_node, ["a", "b", FAILED])
        .on_error("fix", nodes=nodes)
        .budget(escalate_to=FAILED, max_visits={"fix": recover_limit})
        .compile()
    )


def started(m):
    return start(m, AgentState(), at=AT, event_id=1)[0]


def test_a_node_error_routes_to_the_recovery_node_with_the_error_recorded() -> None:
    m = machine()
    state, t = node_error(m, started(m), "a", "boom", at=AT, event_id=2)
    assert (t.source, t.target, state.node, state.status) == ("a", "fix", "fix", Status.RUNNING)
    assert state.errors == ["a: boom"]
    assert state.last_error is not None and state.last_error.node == "a"
    assert state.last_error.step == 1 and t.reason == "error in a: boom"
    # The recovery node's own route takes the run back to the node that failed.
    state, t = advance(m, state, "fix", {}, at=AT, event_id=3)
    assert (t.source, t.target) == ("fix", "a")


def test_recovery_is_bounded_by_the_budget_then_the_run_fails() -> None:
    m = machine(recover_limit=1)
    state, _ = node_error(m, started(m), "a", "boom", at=AT, event_id=2)
    state, _ = advance(m, state, "fix", {}, at=AT, event_id=3)
    state, t = node_error(m, state, "a", "boom again", at=AT, event_id=4)
    assert t.target == FAILED and state.status == Status.FAILED
    assert "recovery exhausted" in state.errors[-1] and "boom again" in state.errors[-1]


def test_errors_of_unlisted_nodes_and_of_the_recovery_node_fail_directly() -> None:
    m = machine(nodes=("a",))
    state, _ = advance(m, started(m), "a", {}, at=AT, event_id=2)
    state, t = node_error(m, state, "b", "no recovery for b", at=AT, event_id=3)
    assert t.target == FAILED and state.errors == ["no recovery for b"]
    assert state.last_error is not None and state.last_error.node == "b"
    m = machine()
    assert m.recovery == {"a": "fix", "b": "fix"}


def test_on_error_is_validated_when_the_graph_is_built() -> None:
    def base() -> Graph:
        return Graph("m", AgentState).node("a", noop).node("fix", noop).entry("a") \
            .edge("a", DONE).edge("fix", FAILED)
    with pytest.raises(InvalidGraph, match="unknown node 'nope'"):
        base().on_error("nope").compile()
    with pytest.raises(InvalidGraph, match="lists unknown node 'x'"):
        base().on_error("fix", nodes=["x"]).compile()
    with pytest.raises(InvalidGraph, match="cannot recover its own errors"):
        base().on_error("fix", nodes=["fix"]).compile()
    with pytest.raises(InvalidGraph, match="unreachable"):  # the error edge is what reaches fix
        base().compile()
    assert base().on_error("fix").compile().recovery == {"a": "fix"}


def test_nodes_cannot_set_last_error() -> None:
    with pytest.raises(UpdateError, match="protected field 'last_error'"):
        apply_update(AgentState(), {"last_error": None})


def test_the_picture_shows_error_edges() -> None:
    assert "a --> fix: error" in to_mermaid(machine())
