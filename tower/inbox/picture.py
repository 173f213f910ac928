"""The agent's picture with the node a run waits at highlighted: the same DOT that
`tower graph` draws, one attribute line added, drawn to SVG by Graphviz on this machine."""

from __future__ import annotations

import functools
import shutil
import subprocess

from tower import Machine, to_dot, to_mermaid
from tower.cli.agents import agents


def highlighted_dot(machine: Machine, node: str) -> str:
    text = to_dot(machine).rstrip()
    assert text.endswith("}")
    # A later attribute statement for a node overrides its earlier ones.
    mark = (f'  "{node}" [fillcolor="#ffd54f", color="#c62828", penwidth=4, '
            'fontcolor="#000000", xlabel="waiting here"];')
    return f"{text[:-1]}{mark}\n}}\n"


@functools.lru_cache(maxsize=64)
def picture(agent: str, node: str) -> tuple[str, str]:
    """("svg", markup) drawn by Graphviz, or ("mermaid", text) when `dot` is missing."""
    machine = agents()[agent].machine
    if node not in machine.nodes:
        raise KeyError(node)
    dot = shutil.which("dot")
    if dot is None:
        return "mermaid", to_mermaid(machine)
    done = subprocess.run([dot, "-Tsvg"], input=highlighted_dot(machine, node).encode(),
                          capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        return "mermaid", to_mermaid(machine)
    svg = done.stdout.decode()
    return "svg", svg[svg.index("<svg"):]  # inline: drop the XML prolog and doctype
