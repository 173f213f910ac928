"""The inbox's own drawing of an agent: every example agent, on any machine (no Graphviz)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from tower.cli.agents import agents
from tower.core.pictures import machine_svg

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("name", sorted(agents()))
def test_every_agent_is_drawn_with_the_waiting_node_highlighted(name: str) -> None:
    machine = agents()[name].machine
    for node in machine.nodes:
        svg = machine_svg(machine, node)
        root = ET.fromstring(svg)  # well-formed XML
        drawn = {g.get("data-node") for g in root.iter(f"{SVG}g")}
        assert set(machine.nodes) <= drawn
        [waiting] = [g for g in root.iter(f"{SVG}g") if "waiting" in (g.get("class") or "")]
        assert waiting.get("data-node") == node
        assert "waiting here" in "".join(waiting.itertext())
        assert "style=" not in svg  # the inbox's CSP forbids inline styles
        # Every node's box lies inside the picture.
        width, height = float(root.get("width") or 0), float(root.get("height") or 0)
        for x, y in re.findall(r'<rect x="([\d.]+)" y="([\d.]+)"', svg):
            assert 0 <= float(x) <= width and 0 <= float(y) <= height


def test_the_refund_gate_and_its_moves_are_drawn_and_nodes_do_not_overlap() -> None:
    machine = agents()["refund"].machine
    svg = machine_svg(machine, "issue_refund")
    assert "GATE refund_review · role manager" in svg and "gate rejected / timeout" in svg
    assert svg == machine_svg(machine, "issue_refund")  # deterministic
    boxes = [tuple(map(float, b)) for b in re.findall(
        r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" rx', svg)]
    for i, (x1, y1, w1, h1) in enumerate(boxes):
        for x2, y2, w2, h2 in boxes[i + 1:]:
            assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1


def test_an_unknown_node_is_refused() -> None:
    with pytest.raises(KeyError):
        machine_svg(agents()["refund"].machine, "pay_everyone")
