"""The Graphviz picture of a machine: gates and budgets marked, made from the compiled graph."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tower.cli.cmd_graph import describe_graph, render
from tower.core.pictures import to_dot
from workflows.account import GRAPH as ACCOUNT
from workflows.refund import RefundAgent
from workflows.registry import AGENTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "graphs"


def test_gated_node_gate_paths_and_budget_note() -> None:
    dot = to_dot(RefundAgent.machine)
    assert '"issue_refund" [label="issue_refund\\ntools: ' in dot
    assert "GATE refund_review (before) · role manager" in dot and "shape=octagon" in dot
    assert '"issue_refund" -> "decline" [label="gate rejected / timeout"' in dot
    assert '"issue_refund" -> "reason" [label="gate stale"' in dot
    assert '"budget" [shape=note, label="budget → decline\\nreason ≤ 3 visits"' in dot


def test_visit_limits_and_escalation_edges() -> None:
    dot = to_dot(ACCOUNT)
    assert "≤ 5 visits" in dot
    assert '"lookup_account" -> "error" [label="over budget"' in dot
    assert '"reason" -> "DONE" [label="final answer [has_answer]"];' in dot
    assert dot.startswith('digraph "account" {') and dot.rstrip().endswith("}")


def test_every_edge_of_the_machine_is_drawn() -> None:
    for name, agent in AGENTS.items():
        graph = describe_graph(agent.machine)
        dot = graph["dot"]
        for t in graph["transitions"]:
            assert f'"{t["source"]}" -> "{t["target"]}"' in dot, (name, t)


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_svg_and_png_are_drawn_by_graphviz() -> None:
    svg = render(RefundAgent.machine, "svg").decode()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "refund_review" in svg
    assert render(ACCOUNT, "png").startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz is not installed")
def test_the_readme_pictures_are_up_to_date() -> None:
    """docs/graphs/render.sh redraws them; a graph change without a redraw fails here."""
    drawn_agents = [n for n in AGENTS if (DOCS / f"{n}.svg").exists()]
    assert {"account", "support", "refund", "migration"} <= set(drawn_agents)
    for name in drawn_agents:
        agent = AGENTS[name]
        assert (DOCS / f"{name}.mmd").read_text() == render(agent.machine, "mermaid").decode(), \
            f"docs/graphs/{name}.mmd is stale: run docs/graphs/render.sh"
        drawn = subprocess.run(["dot", "-Tsvg"], input=to_dot(agent.machine).encode(),
                               capture_output=True, check=True).stdout
        assert (DOCS / f"{name}.svg").read_bytes() == drawn, \
            f"docs/graphs/{name}.svg is stale: run docs/graphs/render.sh"
