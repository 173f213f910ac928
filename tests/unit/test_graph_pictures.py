"""`tower graph`'s pictures of a machine: gates and budgets marked, made from the compiled
graph, the SVG drawn in pure Python (no Graphviz) as the inbox draws it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from tower.cli.cmd_graph import describe_graph, render
from workflows.account import GRAPH as ACCOUNT
from workflows.refund import RefundAgent
from workflows.registry import AGENTS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "graphs"


def test_gated_node_gate_paths_and_visit_limit() -> None:
    svg = render(RefundAgent.machine, "svg")
    assert ET.fromstring(svg).get("aria-label") == "agent refund"  # well-formed, standalone
    assert "GATE refund_review · role manager" in svg and "<polygon" in svg  # an octagon
    assert "gate rejected / timeout" in svg and "gate stale" in svg
    assert "≤ 3 visits" in svg
    # The gate's exits are dashed orange, also where a declared move shares their arrow
    # (rejected and timeout lead to decline, as the payment tool's refusal does).
    assert svg.count('stroke="#c77800" stroke-width="1.4" stroke-dasharray') == 2


def test_visit_limits_and_escalation_edges() -> None:
    svg = render(ACCOUNT, "svg")
    assert "≤ 5 visits" in svg and ">over budget (reason &gt; 5 visits)</text>" in svg
    assert ">final answer [has_answer]</text>" in svg
    # lookup_account -> error, dashed red
    assert svg.count('stroke="#b03030" stroke-width="1.4" stroke-dasharray') == 1


def test_every_edge_of_the_machine_is_drawn() -> None:
    for name, agent in AGENTS.items():
        graph = describe_graph(agent.machine)
        drawn = graph["mermaid"].replace("[*]", "DONE")
        pairs = {(t["source"], t["target"]) for t in graph["transitions"]}
        for source, target in pairs:
            assert f"{source} --> {target}" in drawn, (name, source, target)
        # One path per move in the SVG (the entry's, and each gate exit, error handler and
        # budget escalation that is not also a declared move).
        assert render(agent.machine, "svg").count('<path class="edge"') > len(pairs), name


def test_the_readme_pictures_are_up_to_date() -> None:
    """docs/graphs/render.sh redraws them; a graph change without a redraw fails here."""
    drawn_agents = [n for n in AGENTS if (DOCS / f"{n}.svg").exists()]
    assert {"account", "support", "refund", "migration"} <= set(drawn_agents)
    for name in drawn_agents:
        agent = AGENTS[name]
        for fmt, ext in (("mermaid", "mmd"), ("svg", "svg")):
            assert (DOCS / f"{name}.{ext}").read_text() == render(agent.machine, fmt), \
                f"docs/graphs/{name}.{ext} is stale: run docs/graphs/render.sh"
