"""`tower graph AGENT`: the agent's real state machine, drawn locally.

Mermaid and DOT are text made from the compiled machine; SVG and PNG are drawn by
Graphviz's `dot` (Debian's graphviz package) on this machine, with no network.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from starter.common import CliError, agent_class
from tower import Machine
from tower.core.dot import to_dot
from tower.core.mermaid import to_mermaid
from workflows.registry import AGENTS

FORMATS = ("mermaid", "dot", "svg", "png")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "graph", help="draw an agent's state machine (mermaid, dot, svg, png)",
        description="Draw AGENT's graph, built from the compiled machine, with its approval "
                    "gates and budgets marked. mermaid and dot are printed; svg and png are "
                    "drawn by Graphviz (`apt-get install graphviz`) into --out (svg may also "
                    "go to stdout). --all --out-dir DIR draws every agent.")
    p.add_argument("agent", metavar="AGENT", nargs="?",
                   help=f"one of: {', '.join(sorted(AGENTS))}")
    p.add_argument("--format", choices=FORMATS, default="mermaid")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.add_argument("--all", action="store_true", help="every agent, into --out-dir")
    p.add_argument("--out-dir", help="folder for --all (files named AGENT.FORMAT)")
    p.add_argument("--json", action="store_true",
                   help="the graph as JSON (nodes, transitions, gates, budget, mermaid, dot)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.all:
        if not args.out_dir:
            raise CliError("--all needs --out-dir DIR")
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in sorted(AGENTS):
            path = out_dir / f"{name}.{'mmd' if args.format == 'mermaid' else args.format}"
            path.write_bytes(render(AGENTS[name].machine, args.format))
            written.append(str(path))
        print(json.dumps({"written": written}) if args.json else "\n".join(written))
        return 0
    if not args.agent:
        raise CliError("name an AGENT (or use --all --out-dir DIR)")
    machine = agent_class(args.agent).machine
    if args.json:
        print(json.dumps(describe_graph(machine), indent=2, sort_keys=True))
        return 0
    data = render(machine, args.format)
    if args.out:
        Path(args.out).write_bytes(data)
        print(f"wrote {args.out}", file=sys.stderr)
    elif args.format == "png" and sys.stdout.isatty():
        raise CliError("a PNG is not for the terminal: add --out FILE.png")
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def render(machine: Machine, fmt: str) -> bytes:
    if fmt == "mermaid":
        return to_mermaid(machine).encode()
    dot_text = to_dot(machine)
    if fmt == "dot":
        return dot_text.encode()
    dot = shutil.which("dot")
    if dot is None:
        raise CliError(f"--format {fmt} needs Graphviz's `dot` (apt-get install graphviz); "
                       "--format mermaid or dot need nothing")
    done = subprocess.run([dot, f"-T{fmt}"], input=dot_text.encode(), capture_output=True,
                          timeout=60, check=False)
    if done.returncode != 0:
        raise CliError(f"dot failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def describe_graph(machine: Machine) -> dict[str, Any]:
    budget = machine.budget
    return {
        "agent": machine.name,
        "entry": machine.entry,
        "nodes": [{"name": n.name, "tools": list(n.tools), "description": n.description.strip()}
                  for n in machine.nodes.values()],
        "transitions": [
            {"source": s, "target": t, "label": out.labels.get(t, ""),
             "route": out.route.__name__ if out.route else None,
             "guard": out.guards[t].__name__ if t in out.guards else None}
            for s, out in machine.transitions.items() for t in out.targets],
        "gates": [{"node": node, "gate": g.name, "when": g.when, "role": g.role,
                   "on_reject": g.on_reject, "on_timeout": g.on_timeout, "on_stale": g.on_stale,
                   "editable": list(g.editable)} for node, g in machine.gates.items()],
        "budget": None if budget is None else {
            "escalate_to": budget.escalate_to, "max_steps": budget.max_steps,
            "max_visits": dict(budget.max_visits), "max_tokens": budget.max_tokens,
            "max_cost_usd": budget.max_cost_usd, "limits": budget.limits()},
        "mermaid": to_mermaid(machine),
        "dot": to_dot(machine),
    }
