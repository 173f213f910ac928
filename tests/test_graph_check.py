"""`tower graph --check`: what compile() proved of each agent, and a project whose graph
breaks a proof refused at import with the offending path (exit 2). No server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from towercli import TOWER

ROOT = Path(__file__).resolve().parents[1]
AGENT = '''
from typing import Any

from pydantic import BaseModel
from temporalio import workflow

from tower import DONE, AgentState, AgentWorkflow, Graph, agent, tool


class Args(BaseModel):
    amount: int


@tool(side_effect=True)
def pay(db: Any, args: Args) -> dict[str, Any]:
    """Pay."""
    return {{}}


async def step(ctx: Any, state: AgentState) -> dict[str, Any]:
    return {{}}


GRAPH = ({graph}.compile())


@agent(GRAPH)
class Bad(AgentWorkflow):
    @workflow.run
    async def run(self, request: dict[str, Any]) -> AgentState:
        return await self.drive(AgentState())
'''
CYCLE = ('Graph("bad", AgentState).node("a", step).node("b", step).node("c", step)'
         '.entry("a").edge("a", "b").edge("b", "c").route("c", lambda s: DONE, ["a", DONE])')
UNGATED = ('Graph("bad", AgentState).node("plan", step).node("pay", step, '
           'tools=[pay]).entry("plan").edge("plan", "pay").edge("pay", DONE)')


def tower(*args: str, cwd: Path) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([TOWER, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def test_a_shipped_agent_prints_its_proof() -> None:
    code, out, err = tower("graph", "--check", "refund", cwd=ROOT)
    assert code == 0, err
    assert out.splitlines() == [
        "refund: proven",
        "  cycles through reason, issue_refund: bounded by reason ≤ 3 visits",
        "  issue_refund calls issue_refund: behind gate refund_review",
        "  issue_refund only after gate refund_review: holds"]
    code, out, err = tower("graph", "--check", cwd=ROOT)  # every agent of the project
    assert code == 0, err
    assert "order: proven" in out and "  ship calls create_shipment: ungated — code" in out


def test_a_graph_that_breaks_a_proof_does_not_load(tmp_path: Path) -> None:
    cases = ((CYCLE, "graph 'bad' is invalid: unbounded cycle a → b → c → a"),
             (UNGATED, "graph 'bad' is invalid: node 'pay' calls side-effecting pay on a path "
                       "with no approval gate: START → plan → pay."))
    for i, (graph, why) in enumerate(cases):
        project = tmp_path / f"project{i}"
        (project / "workflows").mkdir(parents=True)
        (project / "workflows" / "__init__.py").write_text("")
        (project / "workflows" / "bad.py").write_text(AGENT.format(graph=graph))
        code, out, err = tower("graph", "--check", cwd=project)
        assert code == 2 and out == "", (code, out, err)
        assert err.startswith("error: cannot load the agents of ") and why in err, err
