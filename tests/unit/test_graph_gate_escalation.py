"""`tower graph` draws an escalation entered through a gate: a timeout (or rejection) that
goes back to a node past its visit limit escalates, and the drawing shows that move."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tower import DONE, AgentState, Gate, Graph
from tower.core.pictures import to_mermaid


async def _node(ctx: Any, state: AgentState) -> dict[str, Any]:
    return {}


def test_an_escalation_through_a_gate_timeout_is_drawn() -> None:
    machine = (
        Graph("ask_again", AgentState)
        .node("ask", _node).node("act", _node).node("give_up", _node)
        .entry("ask")
        .edge("ask", "act")
        .gate("act", Gate(name="review", role="manager", timeout=timedelta(hours=1),
                          on_reject="give_up", on_timeout="ask"))  # timeout: ask again
        .edge("act", DONE).edge("give_up", DONE)
        .budget(escalate_to="give_up", max_visits={"ask": 2})
        .compile())
    drawn = to_mermaid(machine).splitlines()
    assert "    act --> ask: gate timeout" in drawn
    # Entering ask a third time, through the gate's timeout, escalates instead.
    assert "    act --> give_up: over budget (ask > 2 visits)" in drawn
