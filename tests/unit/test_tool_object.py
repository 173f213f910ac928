"""A tool is one object: ``@tool`` makes it from its implementation, nodes and ``ctx.tool``
take it, and a side effect is told what the runtime knows was approved (no node says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gatekit import in_process_tools
from pydantic import BaseModel

from activities.tools import billing
from tower import AgentState, Graph, tool
from tower.contract.failures import NodeFailed
from tower.effects import EffectCall
from tower.testing import approve, run_agent, run_node
from workflows.refund import RefundAgent, RefundState


class Note(BaseModel):
    text: str


def test_tool_makes_the_object_from_its_implementation() -> None:
    @tool(side_effect=True)
    def write_note(db: Any, note: Note, call: EffectCall) -> dict[str, Any]:
        """Write a note.

        More than the model needs to read."""
        return {}

    assert write_note.name == "write_note" and write_note.args is Note
    assert write_note.side_effect and write_note.resource == "db" and write_note.takes_call
    assert write_note.schema().description == "Write a note."

    @tool
    def echo(note: Note) -> dict[str, Any]:
        return note.model_dump()

    assert echo.resource is None and not echo.side_effect and echo(Note(text="a")) == {
        "text": "a"}
    with pytest.raises(TypeError, match="annotated with a pydantic model"):
        tool(lambda db, note: {})
    with pytest.raises(TypeError, match="a side effect needs a database"):
        tool(side_effect=True)(echo.fn)


async def test_ctx_tool_takes_the_node_s_own_object_never_its_name() -> None:
    @tool
    def echo(note: Note) -> dict[str, Any]:
        return {}

    twin = tool(echo.fn)  # another object with the same name

    async def uses(what: Any) -> Any:
        async def node(ctx: Any, state: AgentState) -> dict[str, Any]:
            await ctx.tool(what, {"text": "hi"})
            return {}

        machine = (Graph("uses", AgentState).node("a", node, tools=[echo]).entry("a")
                   .edge("a", "DONE").compile())

        class Agent:
            pass

        Agent.machine = machine  # type: ignore[attr-defined]
        return await run_node(Agent, "a", AgentState(), tools={echo: {"ok": True}})

    _, ctx = await uses(echo)
    assert ctx.calls == ["tool:echo"]
    with pytest.raises(NodeFailed, match="pass the tool object, not its name"):
        await uses("echo")
    with pytest.raises(NodeFailed, match="is not node 'a'.s tool 'echo' \\(another object"):
        await uses(twin)


async def test_the_runtime_tells_a_side_effect_what_was_approved(tmp_path: Path) -> None:
    """The approver lowered the refund: the payment tool is told the run's limit (from its
    state), the decision, the proposal shown and the edit; a read is told nothing."""
    tools = in_process_tools(tmp_path / "tools.sqlite")
    state = RefundState(messages=[{"role": "user", "content":  # type: ignore[list-item]
                                   "Please refund $1,200 on invoice INV-2004"}],
                        limit_cents=40_000, review_timeout_seconds=3600)
    run = await run_agent(RefundAgent, state, tools=tools,
                          decisions=[approve("ann", edits={"amount_cents": 100_000})])
    paying = run.contexts[-2]
    assert paying.node.name == "issue_refund" and paying.calls == ["tool:issue_refund"]
    told = paying.authorities[0]
    assert told.limits == {"limit_cents": 40_000} and told.decision_id
    assert told.proposal["amount_cents"] == 120_000 and told.edits == {"amount_cents": 100_000}
    assert told.approved["amount_cents"] == 100_000
    assert run.state.refund_id and run.state.amount_cents == 100_000
    # The node passed no authority at all: the tool's call is built from the runtime's.
    assert billing.issue_refund.side_effect
    reading = run.contexts[0]
    assert reading.authorities and all(a.decision_id == "" and a.limits == {}
                                       for a in reading.authorities)
