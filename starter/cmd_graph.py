"""`tower graph AGENT`: the agent's real state machine as a Mermaid diagram."""

from __future__ import annotations

import argparse

from starter.common import agent_class
from workflows.machine.mermaid import to_mermaid
from workflows.registry import AGENTS


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("graph", help="draw an agent's state machine (Mermaid)",
                       description="Print AGENT's graph, built from the compiled machine, as a "
                                   "Mermaid state diagram.")
    p.add_argument("agent", metavar="AGENT", help=f"one of: {', '.join(sorted(AGENTS))}")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print(to_mermaid(agent_class(args.agent).machine), end="")
    return 0
