"""Graph validation happens when a graph is compiled (at import), never at run time."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tower import DONE, FAILED, AgentState, Graph
from tower.contract.failures import InvalidGraph
from tower.core.pictures import to_mermaid
from workflows.account import GRAPH as ACCOUNT
from workflows.support import GRAPH as SUPPORT


async def noop(ctx: object, state: AgentState) -> dict[str, object]:
    return {}


def pick(state: AgentState) -> str:
    return "b"


def yes(state: AgentState) -> bool:
    return True


def base() -> Graph:
    return Graph("g", AgentState).node("a", noop).node("b", noop).entry("a")


BROKEN: list[tuple[str, Callable[[], Graph]]] = [
    ("no entry node", lambda: Graph("g", AgentState).node("a", noop).edge("a", DONE)),
    ("entry 'zz' is not a node", lambda: base().entry("zz").edge("a", "b").edge("b", DONE)),
    ("unknown node 'c'", lambda: base().edge("a", "c").edge("b", DONE)),
    ("'b' has no outgoing transition", lambda: base().edge("a", "b")),
    ("unreachable from 'a': b", lambda: base().edge("a", DONE).edge("b", DONE)),
    ("no path to DONE or FAILED from: a, b", lambda: base().edge("a", "b").edge("b", "a")),
    ("not a declared target",
     lambda: base().route("a", pick, ["b"], guards={DONE: yes}).edge("b", DONE)),
    ("already has its transitions", lambda: base().edge("a", "b").edge("a", DONE)),
    ("budget limits visits of unknown node 'x'",
     lambda: base().edge("a", "b").edge("b", DONE).budget(escalate_to=FAILED,
                                                         max_visits={"x": 1})),
    ("budget escalates to unknown node 'err'",
     lambda: base().edge("a", "b").edge("b", DONE).budget(escalate_to="err")),
    ("terminal DONE cannot have outgoing",
     lambda: base().edge("a", "b").edge("b", DONE).edge(DONE, "a")),
]


@pytest.mark.parametrize(("words", "build"), BROKEN, ids=[w for w, _ in BROKEN])
def test_broken_graphs_fail_at_compile_with_a_clear_error(
    words: str, build: Callable[[], Graph]
) -> None:
    with pytest.raises(InvalidGraph, match=words):
        build().compile()


def test_reserved_and_duplicate_node_names_are_refused() -> None:
    for name in ("a", DONE, FAILED, "START"):
        with pytest.raises(InvalidGraph, match="defined twice or is reserved"):
            Graph("g", AgentState).node("a", noop).node(name, noop)


def test_declared_transitions() -> None:
    assert ACCOUNT.declared("START", "reason")
    assert ACCOUNT.declared("reason", "lookup_account")
    assert ACCOUNT.declared("reason", "error"), "any node may escalate to the budget's node"
    assert ACCOUNT.declared("lookup_account", FAILED), "any node may fail"
    assert not ACCOUNT.declared("lookup_account", DONE)
    assert not ACCOUNT.declared(DONE, "reason"), "DONE is never left"
    assert not ACCOUNT.declared(FAILED, "reason"), "FAILED is never left"


def test_mermaid_shows_the_real_machine() -> None:
    text = to_mermaid(SUPPORT)
    assert text.startswith("stateDiagram-v2\n    [*] --> classify\n")
    for line in ("classify --> billing: BILLING", "classify --> technical: TECHNICAL",
                 "classify --> account_help: ACCOUNT", "billing --> [*]"):
        assert line in text
    account = to_mermaid(ACCOUNT)
    assert "reason --> [*]: final answer [has_answer]" in account
    assert "lookup_account --> error: over budget (reason > 5 visits)" in account
